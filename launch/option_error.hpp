// The message of a Boost.Program_options error, safe to ask for. Its what() fills a message template by
// replacing each "%placeholder%" with its value until none is left, so an argument that holds a
// placeholder of its own (an option named --x%original_token%, a value %value%) makes it loop forever, its
// message growing (Boost 1.74 and 1.83, Debian 12's and 13's; fuzzing found it). Such inputs get a message of ours
// instead.
#pragma once

#include <boost/program_options/errors.hpp>

#include <regex>
#include <string>
#include <vector>

namespace ddl {

// `inputs`: every token the parser saw (command-line arguments, config file lines).
inline std::string option_error_message(const boost::program_options::error& e,
                                        const std::vector<std::string>& inputs) {
  static const std::regex placeholder("%[A-Za-z_]+%");
  for (const auto& input : inputs)
    if (std::regex_search(input, placeholder))
      return "cannot parse '" + input + "': it holds a '%name%' that the option parser cannot report on";
  return e.what();
}

}  // namespace ddl
