# Sourced by the setup_*.sh scripts: making a project virtual environment on a fresh
# Debian/Ubuntu machine. The caller defines $python (the interpreter to build venvs from)
# and step() (its log line).

# Installs python3-venv with apt-get when $python lacks venv/ensurepip (root only).
require_venv_module() {
  "$python" -c 'import venv, ensurepip' >/dev/null 2>&1 && return 0
  step "venv/ensurepip missing: apt-get install -y python3-venv"
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "install the python3-venv package (needs root and apt-get)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq python3-venv >/dev/null
}

# ensure_venv DIR: reuses DIR when its pip works, else (re)creates it with $python.
ensure_venv() {
  local venv="$1"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    step "reusing $venv ($("$venv/bin/python" --version 2>&1))"
  else
    step "creating $venv with $("$python" --version 2>&1)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
  fi
}

# prepare_venv DIR: checks $python, (re)makes DIR with ensure_venv, upgrades its pip and
# sets pip=(DIR's pip command) for the caller.
prepare_venv() {
  command -v "$python" >/dev/null || { echo "$python not found" >&2; exit 1; }
  require_venv_module
  ensure_venv "$1"
  pip=("$1/bin/python" -m pip --disable-pip-version-check -q)
  step "upgrading pip"
  "${pip[@]}" install --upgrade "pip>=23"
}
