/* stalled_mount.c: an LD_PRELOAD library that gives a real kvstratad a lower tier that
 * stalls on demand (stalled_mount.py; issue 43's tests of loads that give up).
 *
 * While the file named by KVS_STALL_FLAG exists, opening a block file (a path ending in
 * ".kv") for reading waits, polling the flag every 5 ms, for at most KVS_STALL_MAX_S
 * seconds (120 by default): the reads of an L2/L3 tier (promotions, probes of its files)
 * hang as on a stalled mount, while writes, directory scans and everything in L1 go on.
 * Removing the flag lets the waiting opens go on: the mount recovered. Without
 * KVS_STALL_FLAG nothing changes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static void stall(const char *path, int flags) {
  const char *flag = getenv("KVS_STALL_FLAG");
  if (flag == NULL || path == NULL || (flags & O_ACCMODE) != O_RDONLY) return;
  size_t n = strlen(path);
  if (n < 3 || strcmp(path + n - 3, ".kv") != 0) return;
  const char *max = getenv("KVS_STALL_MAX_S");
  long polls = (max != NULL ? atol(max) : 120) * 200;
  struct timespec pause = {0, 5 * 1000 * 1000};
  for (long i = 0; i < polls && access(flag, F_OK) == 0; ++i) nanosleep(&pause, NULL);
}

static int needs_mode(int flags) {
  return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
}

/* The mode argument of an open that creates (read inside the variadic function itself). */
#define MODE_OF(flags, mode)            \
  do {                                  \
    if (needs_mode(flags)) {            \
      va_list ap;                       \
      va_start(ap, flags);              \
      mode = (mode_t)va_arg(ap, int);   \
      va_end(ap);                       \
    }                                   \
  } while (0)

#define FORWARD_OPEN(name)                                                                 \
  int name(const char *path, int flags, ...) {                                             \
    mode_t mode = 0;                                                                       \
    MODE_OF(flags, mode);                                                                  \
    stall(path, flags);                                                                    \
    static int (*real)(const char *, int, ...) = NULL;                                     \
    if (real == NULL) real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);     \
    return real(path, flags, mode);                                                        \
  }

#define FORWARD_OPENAT(name)                                                               \
  int name(int dir, const char *path, int flags, ...) {                                    \
    mode_t mode = 0;                                                                       \
    MODE_OF(flags, mode);                                                                  \
    stall(path, flags);                                                                    \
    static int (*real)(int, const char *, int, ...) = NULL;                                \
    if (real == NULL) real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, #name); \
    return real(dir, path, flags, mode);                                                   \
  }

FORWARD_OPEN(open)
FORWARD_OPEN(open64)
FORWARD_OPENAT(openat)
FORWARD_OPENAT(openat64)
