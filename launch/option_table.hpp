// A program's options in one table: each defined once, with its group, its name, where its value goes, its
// default, its help, the words or the range it takes, and whether it belongs to the run's description. The
// table makes the Boost.Program_options registration (and so --help, grouped), the check of each value on its
// own (one line naming the option), and the "key = value" description; the rest of the code reads typed values.
// Rules that tie several options together stay with the program, after the table's checks.
#pragma once

#include <boost/program_options.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace ddl {

// An option's word and the value it names.
template <typename Enum>
struct Word {
  const char* text;
  Enum value;
};

// "ring, hier or mpi".
template <typename Enum, std::size_t N>
std::string word_list(const Word<Enum> (&words)[N]) {
  std::string listed;
  for (std::size_t i = 0; i < N; ++i) listed += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + words[i].text;
  return listed;
}

// "--allreduce must be ring, hier or mpi, not 'x'" for a word that names none.
template <typename Enum, std::size_t N>
Enum parse_word(const std::string& text, const Word<Enum> (&words)[N], const std::string& option) {
  for (const auto& w : words)
    if (text == w.text) return w.value;
  throw InputError("--" + option + " must be " + word_list(words) + ", not '" + text + "'");
}

template <typename Enum, std::size_t N>
const char* word_of(Enum value, const Word<Enum> (&words)[N]) {
  for (const auto& w : words)
    if (w.value == value) return w.text;
  return "?";
}

// Where a number may lie: each end closed, open or absent. NaN and the infinities lie nowhere, unless the
// range is unchecked (a number whose rule ties it to other options).
struct Range {
  std::optional<double> low, high;
  bool low_open = false, high_open = false;
  bool checked = true;

  static Range at_least(double x) { return {x, std::nullopt, false, false, true}; }
  static Range above(double x) { return {x, std::nullopt, true, false, true}; }
  static Range below(double x) { return {std::nullopt, x, false, true, true}; }
  static Range closed(double a, double b) { return {a, b, false, false, true}; }
  static Range half_open(double a, double b) { return {a, b, false, true, true}; }
  static Range open_closed(double a, double b) { return {a, b, true, false, true}; }
  static Range unchecked() { return {std::nullopt, std::nullopt, false, false, false}; }

  bool holds(double x) const {
    if (!checked) return true;
    if (!std::isfinite(x)) return false;
    if (low && (low_open ? x <= *low : x < *low)) return false;
    return !(high && (high_open ? x >= *high : x > *high));
  }
  // "at least 1", ">= 0", "a positive number", "below 1", "in [0, 1)".
  std::string text(bool integral) const {
    const auto number = [](double x) {
      std::ostringstream s;
      s << x;
      return s.str();
    };
    if (low && high)
      return "in " + std::string(low_open ? "(" : "[") + number(*low) + ", " + number(*high) + (high_open ? ")" : "]");
    if (high) return "below " + number(*high);
    if (!low) return "a number";
    if (low_open) return *low == 0 ? "a positive number" : "above " + number(*low);
    if (*low == 0) return integral ? ">= 0" : "a number >= 0";
    return "at least " + number(*low);
  }
};

template <typename Options>
class OptionTable {
 public:
  // Whether an option's value is part of the run's description (what defines the run, not where it writes).
  enum class Described { yes, no };

  struct Row {
    std::string group, name, help;
    // The option's value for Boost, read into `o` or, for one converted after reading, into `text`.
    std::function<boost::program_options::value_semantic*(Options& o, std::string& text)> value;
    // Converts the text read (words, lists, numbers with units), then checks the value on its own.
    std::function<void(Options& o, const std::string& text)> finish;
    // The value as a word or number, as it would be given ("" for a text not given).
    std::function<std::string(const Options& o)> show;
    bool described = false;  // in the run's description
    bool list = false;       // described a "name += item" line each, as checkpoints have always held lists
    bool flag = false;       // given by its name alone
  };

  // The group the rows added next belong to: a caption of --help.
  OptionTable& group(std::string caption) {
    group_ = std::move(caption);
    return *this;
  }

  template <typename T>
  OptionTable& number(const char* name, T Options::*member, Range range, std::string help,
                      Described described = Described::yes, const char* default_text = nullptr) {
    const std::string option = name;
    return add({group_, name, std::move(help),
                [member, default_text](Options& o, std::string&) -> boost::program_options::value_semantic* {
                  auto* value = boost::program_options::value(&(o.*member));
                  return default_text ? value->default_value(o.*member, default_text) : value->default_value(o.*member);
                },
                [member, range, option](Options& o, const std::string&) {
                  if (!range.holds(static_cast<double>(o.*member)))
                    throw InputError("--" + option + " must be " + range.text(std::numeric_limits<T>::is_integer));
                },
                shown(member), described == Described::yes});
  }

  OptionTable& flag(const char* name, bool Options::*member, std::string help, Described described = Described::yes) {
    return add({group_, name, std::move(help),
                [member](Options& o, std::string&) -> boost::program_options::value_semantic* {
                  return boost::program_options::bool_switch(&(o.*member));
                },
                nullptr, shown(member), described == Described::yes, false, true});
  }

  // A text taken as it is: a path, a name. `required` (what to give) refuses it empty.
  OptionTable& text(const char* name, std::string Options::*member, std::string help,
                    Described described = Described::no, const char* required = nullptr) {
    const std::string option = name;
    return add({group_, name, std::move(help),
                [member](Options& o, std::string&) -> boost::program_options::value_semantic* {
                  auto* value = boost::program_options::value(&(o.*member));
                  return (o.*member).empty() ? value : value->default_value(o.*member);
                },
                refuse_empty(member, option, required), shown(member), described == Described::yes});
  }

  // Texts given after the option, one or more (paths).
  OptionTable& texts(const char* name, std::vector<std::string> Options::*member, std::string help,
                     const char* required = nullptr) {
    const std::string option = name;
    return add({group_, name, std::move(help),
                [member](Options& o, std::string&) -> boost::program_options::value_semantic* {
                  return boost::program_options::value(&(o.*member))->multitoken();
                },
                refuse_empty(member, option, required),
                [member](const Options& o) {
                  std::string joined;
                  for (const auto& t : o.*member) joined += (joined.empty() ? "" : " ") + t;
                  return joined;
                }});
  }

  template <typename Enum, std::size_t N>
  OptionTable& words(const char* name, Enum Options::*member, const Word<Enum> (&words)[N], std::string help,
                     Described described = Described::yes) {
    const std::string option = name;
    return add(
        {group_, name, std::move(help),
         [member, &words](Options& o, std::string& text) -> boost::program_options::value_semantic* {
           return boost::program_options::value(&text)->default_value(word_of(o.*member, words));
         },
         [member, &words, option](Options& o, const std::string& text) { o.*member = parse_word(text, words, option); },
         [member, &words](const Options& o) { return std::string(word_of(o.*member, words)); },
         described == Described::yes});
  }

  // An option read as text and converted by `parse` (which throws InputError naming it), shown again as text
  // by `show`. An empty default shows none in --help. A list is described an item a line.
  enum class Listed { no, yes };
  OptionTable& converted(const char* name, std::string default_text, std::string help,
                         std::function<void(Options&, const std::string&)> parse,
                         std::function<std::string(const Options&)> show, Described described = Described::no,
                         Listed listed = Listed::no) {
    return add({group_, name, std::move(help),
                [default_text](Options&, std::string& text) -> boost::program_options::value_semantic* {
                  auto* value = boost::program_options::value(&text);
                  return default_text.empty() ? value : value->default_value(default_text);
                },
                std::move(parse), std::move(show), described == Described::yes, listed == Listed::yes});
  }

  const std::vector<Row>& rows() const { return rows_; }

  // Adds the options of every group to `all` in the table's order, for Boost to read into `o`, and the
  // converted ones' texts into `texts` (one a row).
  void add_to(boost::program_options::options_description& all, Options& o, std::vector<std::string>& texts) const {
    texts.assign(rows_.size(), "");
    std::vector<boost::program_options::options_description> groups;
    std::vector<std::string> captions;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      const Row& row = rows_[i];
      if (!row.group.empty() && (captions.empty() || captions.back() != row.group)) {
        captions.push_back(row.group);
        groups.emplace_back(row.group);
      }
      auto& into = row.group.empty() ? all : groups.back();
      into.add_options()(row.name.c_str(), row.value(o, texts[i]), row.help.c_str());
    }
    for (const auto& g : groups) all.add(g);
  }

  // Converts and checks every row's value, in the table's order, after Boost has read them all.
  void finish(Options& o, const std::vector<std::string>& texts) const {
    for (std::size_t i = 0; i < rows_.size(); ++i)
      if (rows_[i].finish) rows_[i].finish(o, texts[i]);
  }

  // "name = value" a line, for the described rows.
  std::string describe(const Options& o) const {
    std::string text;
    for (const Row& row : rows_) {
      if (!row.described) continue;
      const std::string value = row.show(o);
      if (!row.list) {
        text += row.name + " = " + value + "\n";
        continue;
      }
      std::istringstream items(value);
      for (std::string item; std::getline(items, item, ',');) text += row.name + " += " + item + "\n";
    }
    return text;
  }

  // "--name value" for each option whose value is not the default's (a flag by its name alone).
  std::string given(const Options& o) const {
    const Options defaults{};
    std::string text;
    for (const Row& row : rows_) {
      const std::string value = row.show(o);
      if (value == row.show(defaults)) continue;
      text += (text.empty() ? "--" : " --") + row.name + (row.flag ? "" : " " + value);
    }
    return text;
  }

 private:
  // A text or texts option's check: `required` (what to give), it may not be left empty.
  template <typename T>
  static std::function<void(Options&, const std::string&)> refuse_empty(T Options::*member, std::string option,
                                                                        const char* required) {
    return [member, option, required](Options& o, const std::string&) {
      if (required && (o.*member).empty()) throw InputError("--" + option + " is required (" + required + ")");
    };
  }

  template <typename T>
  static std::function<std::string(const Options&)> shown(T Options::*member) {
    return [member](const Options& o) {
      std::ostringstream s;
      s << o.*member;
      return s.str();
    };
  }

  OptionTable& add(Row row) {
    rows_.push_back(std::move(row));
    return *this;
  }

  std::string group_;  // "": the program's own caption
  std::vector<Row> rows_;
};

}  // namespace ddl
