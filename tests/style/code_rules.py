#!/usr/bin/env python3
"""Two rules of docs/architecture.md that a reader should not have to police by hand:
- no function in core/, comm/, models/ or launch/ is over 80 lines (signature to closing brace);
- no option of ddl_train is compared with a word outside its table (launch/train_options.cpp): the rest of
  the code reads typed values.
Prints each breach as file:line and exits 1 if there is one."""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MOST_LINES = 80
CONTROL = re.compile(r"^\s*(if|for|while|switch|namespace|struct|class|enum|else|catch|do|try|case|return|using|"
                     r"template|static_assert|#)\b")


def code_lines(path):
    """The file's lines without string and character literals or // comments (braces in them do not count)."""
    with open(path, errors="replace") as f:
        lines = f.read().split("\n")
    out = []
    for line in lines:
        line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
        line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
        out.append(line.split("//")[0])
    return out


def long_functions(path):
    """(line, length) of each function definition over MOST_LINES: a line at namespace or class depth that
    starts a declaration with a parenthesis and, within six lines and before any semicolon, opens a body."""
    lines = code_lines(path)
    i = 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        starts = (indent <= 4 and re.match(r"^\s*[A-Za-z_~]", line) and "(" in line and not CONTROL.match(line)
                  and "=" not in line.split("(")[0])
        if starts:
            k = i
            while k < len(lines) and k < i + 6 and ";" not in lines[k] and not lines[k].rstrip().endswith("{"):
                k += 1
            if k < len(lines) and k < i + 6 and lines[k].rstrip().endswith("{"):
                depth, j = 0, k
                while j < len(lines):
                    depth += lines[j].count("{") - lines[j].count("}")
                    if depth <= 0:
                        break
                    j += 1
                if j - i + 1 > MOST_LINES:
                    yield i + 1, j - i + 1
                i = j + 1
                continue
        i += 1


def option_members():
    """The data members of TrainOptions, from its header."""
    with open(os.path.join(ROOT, "launch", "train_options.hpp")) as f:
        text = f.read()
    body = text[text.index("struct TrainOptions {"):]
    body = body[:body.index("\n};")]
    names = set()
    for line in body.split("\n"):
        line = line.split("//")[0]
        if "(" in line or not line.strip().endswith(";"):
            continue
        declared = re.sub(r"\{[^}]*\}|=[^,;]*", "", line.strip().rstrip(";"))
        for part in declared.split(","):
            words = re.findall(r"[A-Za-z_]\w*", part)
            if words:
                names.add(words[-1])
    return names


def main():
    breaches = []
    for top in ("core", "comm", "models", "launch"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if name.endswith((".cpp", ".hpp")):
                    path = os.path.join(folder, name)
                    for line, length in long_functions(path):
                        breaches.append(f"{os.path.relpath(path, ROOT)}:{line}: a function of {length} lines "
                                        f"(at most {MOST_LINES})")
    members = option_members()
    compared = re.compile(r"\.(\w+)\s*[!=]=\s*\"")
    for folder, _, files in os.walk(os.path.join(ROOT, "launch")):
        for name in sorted(files):
            path = os.path.join(folder, name)
            if not name.endswith((".cpp", ".hpp")) or os.path.relpath(path, ROOT) == "launch/train_options.cpp":
                continue
            for number, line in enumerate(open(path, errors="replace"), 1):
                for member in compared.findall(line):
                    if member in members:
                        breaches.append(f"{os.path.relpath(path, ROOT)}:{number}: option {member} compared with a "
                                        "word outside its table (launch/train_options.cpp)")
    for b in breaches:
        print(b)
    print(f"code_rules: {len(breaches)} breaches; {len(members)} option members checked")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
