#include "core/graph/operator.hpp"

namespace ddl {

std::int64_t OpSpec::integer(const std::string& attribute, std::int64_t otherwise) const {
  const auto it = attributes.find(attribute);
  if (it == attributes.end()) return otherwise;
  if (it->second.ints.size() != 1) fail("its attribute " + attribute + " is not one integer");
  return it->second.ints[0];
}

float OpSpec::real(const std::string& attribute, float otherwise) const {
  const auto it = attributes.find(attribute);
  if (it == attributes.end()) return otherwise;
  if (it->second.floats.size() != 1) fail("its attribute " + attribute + " is not one real number");
  return it->second.floats[0];
}

std::vector<std::int64_t> OpSpec::ints(const std::string& attribute, std::vector<std::int64_t> otherwise) const {
  const auto it = attributes.find(attribute);
  return it == attributes.end() ? otherwise : it->second.ints;
}

std::string OpSpec::text(const std::string& attribute, const std::string& otherwise) const {
  const auto it = attributes.find(attribute);
  return it == attributes.end() ? otherwise : it->second.text;
}

const std::vector<std::int64_t>* OpSpec::integer_input(std::size_t i) const {
  const auto it = integers.find(i);
  return it == integers.end() ? nullptr : &it->second.values;
}

void OpSpec::fail(const std::string& problem) const {
  std::string line = name + ": " + problem;
  // Names and attributes come from the file: a control character in one must not break the message's line.
  for (char& c : line)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  throw InputError(line);
}

const OpValue& Operator::input(OpInputs in, std::size_t i) const {
  if (i >= in.size() || !in[i]) spec_.fail("input " + std::to_string(i + 1) + " is missing");
  return *in[i];
}

float Operator::constant_number(OpInputs in, std::size_t i, float otherwise) const {
  if (i >= in.size() || !in[i]) return otherwise;
  if (!in[i]->constant || !in[i]->data || product(in[i]->dims) != 1)
    spec_.fail("its input " + std::to_string(i + 1) + " is not one constant number");
  return in[i]->data[0];
}

}  // namespace ddl
