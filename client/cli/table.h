// Plain-text tables for the CLI: a header row and left-aligned columns separated by two
// spaces. Thread-compatible.
#ifndef KVSTRATA_CLIENT_CLI_TABLE_H_
#define KVSTRATA_CLIENT_CLI_TABLE_H_

#include <ostream>
#include <string>
#include <vector>

namespace kvstrata {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_CLIENT_CLI_TABLE_H_
