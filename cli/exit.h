// How `epochfs` refuses or fails: one line on stderr and exit code 2 (bad input, a
// refused operation) or 1 (a failure while running), shared by every subcommand.
//
// Thread-safety: writes to std::cerr.
#pragma once

#include <iostream>
#include <string>

namespace epochfs::cli {

inline constexpr int kExitBadInput = 2;
inline constexpr int kExitFailure = 1;

// Prints "epochfs: error: MESSAGE" and returns kExitBadInput.
inline int Refuse(const std::string& message) {
  std::cerr << "epochfs: error: " << message << "\n";
  return kExitBadInput;
}

// Prints "epochfs: error: MESSAGE" and returns kExitFailure.
inline int Fail(const std::string& message) {
  std::cerr << "epochfs: error: " << message << "\n";
  return kExitFailure;
}

}  // namespace epochfs::cli
