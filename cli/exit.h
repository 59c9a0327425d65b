// How `epochfs` refuses: one line on stderr and exit code 2, shared by every subcommand.
//
// Thread-safety: writes to std::cerr.
#pragma once

#include <iostream>
#include <string>

namespace epochfs::cli {

inline constexpr int kExitBadInput = 2;

// Prints "epochfs: error: MESSAGE" and returns kExitBadInput.
inline int Refuse(const std::string& message) {
  std::cerr << "epochfs: error: " << message << "\n";
  return kExitBadInput;
}

}  // namespace epochfs::cli
