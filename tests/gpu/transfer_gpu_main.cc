// main() of transfer_gpu_test: `--out PATH` (or --out=PATH) becomes
// --gtest_output=json:PATH; every other flag goes to GoogleTest.
#include <string>
#include <vector>

#include "gtest/gtest.h"

int main(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--out" && i + 1 < argc) {
      args.push_back(std::string("--gtest_output=json:") + argv[++i]);
    } else if (arg.rfind("--out=", 0) == 0) {
      args.push_back("--gtest_output=json:" + arg.substr(6));
    } else {
      args.push_back(arg);
    }
  }
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());
  int count = static_cast<int>(pointers.size());
  testing::InitGoogleTest(&count, pointers.data());
  return RUN_ALL_TESTS();
}
