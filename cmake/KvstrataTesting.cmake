# kvstrata_add_test(<name> SOURCES <files...> LIBS <targets...> [LABELS <labels...>]
#                   [DISCOVERY_FILTER <gtest filter>] [ONE_PROCESS])
# One GoogleTest binary; every test case becomes a CTest test (those DISCOVERY_FILTER
# selects, if given). ONE_PROCESS: one CTest test `<name>` runs the whole binary in one
# process instead (tests that share an expensive resource, e.g. a server started per process).
include(GoogleTest)
function(kvstrata_add_test name)
  cmake_parse_arguments(ARG "ONE_PROCESS" "DISCOVERY_FILTER" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  kvstrata_strict(${name})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gmock GTest::gtest_main)
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(ARG_ONE_PROCESS)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT 300)
  elseif(ARG_DISCOVERY_FILTER)
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 NO_PRETTY_TYPES NO_PRETTY_VALUES
                         TEST_FILTER "${ARG_DISCOVERY_FILTER}"
                         PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT 300)
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 NO_PRETTY_TYPES NO_PRETTY_VALUES PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT 300)
  endif()
endfunction()
