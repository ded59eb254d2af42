# Warnings as errors for our own code, and the sanitizer switch.
function(kvstrata_strict target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Werror -Wno-missing-field-initializers>)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety>)
  endif()
endfunction()

if(KVSTRATA_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12's -Wmaybe-uninitialized misfires on std::variant<std::string, ...> moves once
    # ASan instruments them (flat_json.cc); ASan itself checks uninitialised use at run time.
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-error=maybe-uninitialized>)
  endif()
  add_link_options(-fsanitize=address,undefined)
elseif(KVSTRATA_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC warns that Abseil's headers use atomic_thread_fence, which TSan does not model.
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-error=tsan>)
  endif()
  add_link_options(-fsanitize=thread)
elseif(KVSTRATA_SANITIZE STREQUAL "fuzzer")
  # libFuzzer targets (tests/fuzz) with ASan + UBSan; clang only (scripts/sanitize.sh fuzz).
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KVSTRATA_SANITIZE=fuzzer needs clang (CXX=clang++)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(NOT KVSTRATA_SANITIZE STREQUAL "")
  message(FATAL_ERROR
          "KVSTRATA_SANITIZE must be '', 'address', 'thread' or 'fuzzer', not '${KVSTRATA_SANITIZE}'")
endif()
