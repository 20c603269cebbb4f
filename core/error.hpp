// Errors thrown by ddl. Each carries enough context (file, shape, option) for one line at the top-level
// boundary to tell the user what went wrong; nothing below main prints or exits.
#pragma once

#include <stdexcept>
#include <string>

namespace ddl {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input: options, files, shapes. Distinguished so tools can exit with a usage-style code.
class InputError : public Error {
 public:
  using Error::Error;
};

}  // namespace ddl
