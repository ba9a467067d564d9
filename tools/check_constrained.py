#!/usr/bin/env python3
# Checks outputs of constrained decoding (kvlm run --json-schema / --regex / --json) against their schema or regex,
# and with --self-test checks the corpus in tests/data/constrained/ (schema keyword subset, regex subset, examples).
"""
usage: tools/check_constrained.py CASES_FILE       (JSON lines; "-" reads stdin)
       tools/check_constrained.py --self-test [--data-dir DIR]

CASES_FILE holds one JSON object a line:
    {"kind": "schema", "schema": {...}, "output": "...", "name": "...", "seed": 1}
    {"kind": "regex",  "regex": "...",  "output": "...", "name": "...", "seed": 1}
("name" and "seed" are optional and only label the report; "kind": "json" checks that the output is any JSON value.)

schema: the output must parse as one JSON value (no NaN/Infinity, no duplicate object keys) and validate under
        Draft 2020-12 with format checking (date, time, date-time, email, uuid). A "pattern" follows ECMA-262:
        unanchored search, but "$" is the end of the input (Python's "$" would also accept a trailing newline),
        and \\d \\w \\s have their ASCII meanings.
regex:  re.fullmatch(regex, output) with re.ASCII, so \\d \\w \\s are ASCII classes and "." is any character
        except newline, the engine's meanings (re.DOTALL would hide an engine that lets "." emit a newline).

Prints one line per failure, then "checked N outputs, M failed"; exit status 0 only if N > 0 and M == 0.
"""
import argparse
import functools
import json
import os
import re
import sys

try:
    import jsonschema
    from jsonschema import Draft202012Validator, FormatChecker, ValidationError
    from jsonschema.exceptions import best_match
except ImportError:  # pragma: no cover
    sys.exit("check_constrained.py: needs the jsonschema package (pip install jsonschema)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA_DIR = os.path.join(ROOT, "tests", "data", "constrained")
MAX_SHOWN_OUTPUT = 400


# ----------------------------------------------------------------------------------------------------------------
# Regex subset (what the engine compiles). Parsing it lets --self-test reject syntax the engine would not accept and
# find out which characters a schema "pattern" can produce.

class RegexSubsetError(ValueError):
    pass


SIMPLE_ESCAPES = set('.\\/-[](){}*+?|^$"')
CONTROL_ESCAPES = {"t": "\t", "n": "\n", "r": "\r"}
CLASS_ESCAPES = {
    "d": lambda c: "0" <= c <= "9",
    "w": lambda c: c.isascii() and (c.isalnum() or c == "_"),
    "s": lambda c: c in " \t\n\r\f\v",
}
CLASS_ESCAPES["D"] = lambda c: not CLASS_ESCAPES["d"](c)
CLASS_ESCAPES["W"] = lambda c: not CLASS_ESCAPES["w"](c)
CLASS_ESCAPES["S"] = lambda c: not CLASS_ESCAPES["s"](c)
OUTSIDE_SPECIAL = set("()[]{}*+?|^$")   # must be escaped to be literal outside a class (")" etc. handled by parser)


class _RegexParser:
    """Recursive descent over the engine's subset. Collects one character predicate per atom in self.atoms."""

    def __init__(self, src):
        self.src = src
        self.atoms = []
        start, end = 0, len(src)
        if src.startswith("^"):
            start = 1
        if end > start and src.endswith("$") and not _escaped_at(src, end - 1):
            end -= 1
        self.pos, self.end = start, end

    def fail(self, why):
        raise RegexSubsetError(f"{why} at offset {self.pos} in {self.src!r}")

    def peek(self, k=0):
        p = self.pos + k
        return self.src[p] if p < self.end else None

    def parse(self):
        self.alternation()
        if self.pos != self.end:
            self.fail("unbalanced ')'" if self.peek() == ")" else "unexpected character")
        return self.atoms

    def alternation(self):
        self.concatenation()
        while self.peek() == "|":
            self.pos += 1
            self.concatenation()

    def concatenation(self):
        while self.peek() is not None and self.peek() not in "|)":
            self.atom()
            self.quantifier()

    def atom(self):
        c = self.peek()
        if c == "(":
            self.pos += 1
            if self.peek() == "?":
                if self.peek(1) != ":":
                    self.fail("only (?: ) groups are supported (no lookaround, named groups or flags)")
                self.pos += 2
            self.alternation()
            if self.peek() != ")":
                self.fail("missing ')'")
            self.pos += 1
        elif c == "[":
            self.pos += 1
            self.atoms.append(self.char_class())
        elif c == ".":
            self.pos += 1
            self.atoms.append(lambda ch: ch != "\n")
        elif c == "\\":
            self.atoms.append(self.escape()[1])
        elif c in OUTSIDE_SPECIAL:
            self.fail(f"unescaped {c!r}" if c not in "*+?{" else f"quantifier {c!r} with nothing to repeat")
        else:
            self.pos += 1
            self.atoms.append(lambda ch, lit=c: ch == lit)

    def quantifier(self):
        c = self.peek()
        if c in ("*", "+", "?"):
            self.pos += 1
        elif c == "{":
            m = re.compile(r"\{([0-9]+)(,([0-9]*))?\}").match(self.src, self.pos, self.end)
            if not m:
                self.fail("bad {n}, {n,} or {n,m} quantifier")
            lo = int(m.group(1))
            if m.group(3):
                if int(m.group(3)) < lo:
                    self.fail("{n,m} with m < n")
            self.pos = m.end()
        else:
            return
        if self.peek() is not None and self.peek() in "*+?{":
            self.fail("lazy, possessive or repeated quantifiers are not supported")

    def escape(self):
        """At a backslash. Returns ("char", c) or ("set", predicate) and consumes it."""
        self.pos += 1
        c = self.peek()
        if c is None:
            self.fail("trailing backslash")
        self.pos += 1
        if c in SIMPLE_ESCAPES:
            return c, (lambda ch, lit=c: ch == lit)
        if c in CONTROL_ESCAPES:
            lit = CONTROL_ESCAPES[c]
            return lit, (lambda ch, lit=lit: ch == lit)
        if c in CLASS_ESCAPES:
            return None, CLASS_ESCAPES[c]
        if c == "u":
            hexdigits = self.src[self.pos:self.pos + 4]
            if self.pos + 4 > self.end or not re.fullmatch(r"[0-9A-Fa-f]{4}", hexdigits):
                self.fail("\\u needs four hex digits")
            self.pos += 4
            lit = chr(int(hexdigits, 16))
            return lit, (lambda ch, lit=lit: ch == lit)
        self.pos -= 1
        self.fail(f"unsupported escape \\{c}")

    def char_class(self):
        negated = False
        if self.peek() == "^":
            negated = True
            self.pos += 1
        items = []
        if self.peek() == "]":
            self.fail("empty character class (write \\] for a literal ])")
        while True:
            c = self.peek()
            if c is None:
                self.fail("missing ']'")
            if c == "]":
                self.pos += 1
                break
            lo, pred = self.class_char()
            if lo is None:          # \d, \w, ... join the class as they are
                items.append(pred)
                continue
            if self.peek() == "-" and self.peek(1) not in (None, "]"):
                self.pos += 1
                hi, _ = self.class_char()
                if hi is None:
                    self.fail("a range cannot end in a class escape")
                if ord(hi) < ord(lo):
                    self.fail("reversed range")
                items.append(lambda ch, a=lo, b=hi: a <= ch <= b)
            else:
                items.append(pred)
        if negated:
            return lambda ch: not any(f(ch) for f in items)
        return lambda ch: any(f(ch) for f in items)

    def class_char(self):
        """One class member: (literal, predicate), literal None for a class escape such as \d."""
        c = self.peek()
        if c == "\\":
            return self.escape()
        if c in "[-^.":
            self.fail(f"escape {c!r} inside a character class (write \\{c})")
        self.pos += 1
        return c, (lambda ch, lit=c: ch == lit)


def _escaped_at(src, i):
    """True when src[i] is preceded by an odd number of backslashes."""
    n = 0
    while i - 1 - n >= 0 and src[i - 1 - n] == "\\":
        n += 1
    return n % 2 == 1


def parse_regex_subset(src):
    """Raises RegexSubsetError unless src is in the engine's regex subset; returns one predicate per atom."""
    return _RegexParser(src).parse()


def end_anchor_to_python(src):
    """Rewrites an unescaped "$" outside classes to \\Z: end of input only, as in ECMA-262 and the engine."""
    out, i, in_class = [], 0, False
    while i < len(src):
        c = src[i]
        if c == "\\" and i + 1 < len(src):
            out.append(src[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            if src[i + 1:i + 2] == "^":
                out.append("[^")
                i += 2
                continue
            if src[i + 1:i + 2] == "]":
                out.append("[]")
                i += 2
                continue
        elif c == "$":
            c = r"\Z"
        out.append(c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=None)
def compile_regex(src):
    return re.compile(end_anchor_to_python(src), re.ASCII)


# ----------------------------------------------------------------------------------------------------------------
# Validation of outputs

RFC3339_TIME = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])")
RFC3339_DATE = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])")
EMAIL_DOMAIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                          r"|\[[0-9A-Fa-f:.]+\]")


def _strict_time(instance):
    if not isinstance(instance, str):
        return True
    return bool(RFC3339_TIME.fullmatch(instance))


def _strict_date_time(instance):
    if not isinstance(instance, str):
        return True
    parts = re.split("[Tt]", instance)
    if len(parts) != 2 or not RFC3339_DATE.fullmatch(parts[0]) or not _strict_time(parts[1]):
        return False
    import datetime
    try:
        datetime.date.fromisoformat(parts[0])
    except ValueError:
        return False
    return True


def _email(instance):
    """jsonschema's own check is only '"@" in instance'; this wants local@domain with a host name or [literal]."""
    if not isinstance(instance, str):
        return True
    local, at, domain = instance.rpartition("@")
    if not at or not local or any(ord(c) < 0x20 or c == "\x7f" for c in instance):
        return False
    if not (local.startswith('"') and local.endswith('"') and len(local) > 1) and (
            any(c in local for c in ' "(),:;<>@[\\]') or local.startswith(".") or local.endswith(".") or ".." in local):
        return False
    return bool(EMAIL_DOMAIN.fullmatch(domain))


def make_format_checker():
    checker = FormatChecker()
    checker.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
    # date-time and time are only in jsonschema's checker when rfc3339-validator is installed; never skip them.
    if "date-time" not in checker.checkers:
        checker.checks("date-time")(_strict_date_time)
    if "time" not in checker.checkers:
        checker.checks("time")(_strict_time)
    checker.checks("email")(_email)
    return checker


def _ecma_pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not compile_regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


StrictValidator = jsonschema.validators.extend(Draft202012Validator, {"pattern": _ecma_pattern})
FORMAT_CHECKER = make_format_checker()


class _OutputError(ValueError):
    pass


def _reject_constant(name):
    raise _OutputError(f"{name} is not JSON")


def _no_duplicate_keys(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _OutputError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def parse_json_output(output):
    try:
        return json.loads(output, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys)
    except _OutputError as e:
        raise ValueError(str(e))
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}")


def check_schema_output(schema, output):
    """Returns None when output is valid for schema, else the reason."""
    try:
        value = parse_json_output(output)
    except ValueError as e:
        return str(e)
    validator = StrictValidator(schema, format_checker=FORMAT_CHECKER)
    error = best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"schema violation at {where}: {error.message}"


def check_regex_output(regex, output):
    if compile_regex(regex).fullmatch(output):
        return None
    return f"does not fullmatch {regex!r}"


def _label(case, lineno):
    label = case.get("name") or f"line {lineno}"
    if "seed" in case:
        label += f" seed={case['seed']}"
    return label


def _shown(output):
    text = json.dumps(output, ensure_ascii=False)
    if len(text) > MAX_SHOWN_OUTPUT:
        text = text[:MAX_SHOWN_OUTPUT] + f"... ({len(output)} chars)"
    return text


def check_cases(lines):
    checked = failed = 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        checked += 1
        try:
            case = json.loads(line)
            if not isinstance(case, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            failed += 1
            print(f"FAIL line {lineno}: bad case line ({e}): {line.strip()[:MAX_SHOWN_OUTPUT]}")
            continue
        kind, output = case.get("kind"), case.get("output")
        if not isinstance(output, str):
            why = 'no "output" string'
        elif kind == "schema" and isinstance(case.get("schema"), (dict, bool)):
            why = check_schema_output(case["schema"], output)
        elif kind == "json":
            why = check_schema_output(True, output)
        elif kind == "regex" and isinstance(case.get("regex"), str):
            try:
                why = check_regex_output(case["regex"], output)
            except re.error as e:
                why = f"regex does not compile: {e}"
        else:
            why = f'unknown kind {kind!r} or missing "schema"/"regex"'
        if why is not None:
            failed += 1
            print(f"FAIL {_label(case, lineno)} [{kind}]: {why}; output: {_shown(output)}")
    print(f"checked {checked} outputs, {failed} failed")
    return checked > 0 and failed == 0


# ----------------------------------------------------------------------------------------------------------------
# --self-test: the corpus must stay inside what the engine supports

ALLOWED_KEYWORDS = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items", "minItems", "maxItems",
    "anyOf", "oneOf", "minLength", "maxLength", "pattern", "format", "$ref", "$defs",
    "title", "description", "$schema", "$id", "$comment", "examples", "default",
}
ALLOWED_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
ALLOWED_FORMATS = {"date", "time", "date-time", "email", "uuid"}
MAX_ITEMS_LIMIT = 5
MAX_LENGTH_LIMIT = 40
LONG_KEY = 30          # a property name this long counts as a "long fixed key"
UNSAFE_PATTERN_CHARS = ['"', "\\"] + [chr(i) for i in range(0x20)]


def _json_type(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _tag(value):
    return json.dumps(value, sort_keys=True)


class SchemaLinter:
    def __init__(self, name, root):
        self.name, self.root, self.errors, self.used = name, root, [], set()

    def err(self, path, why):
        self.errors.append(f"schema {self.name} at {path or '/'}: {why}")

    def resolve(self, schema):
        seen = set()
        while isinstance(schema, dict) and "$ref" in schema:
            ref = schema["$ref"]
            if ref in seen or not isinstance(ref, str) or not ref.startswith("#/$defs/"):
                return None
            seen.add(ref)
            schema = self.root.get("$defs", {}).get(ref[len("#/$defs/"):])
        return schema

    def walk(self, schema, path="", at_root=False):
        if isinstance(schema, bool):
            return
        if not isinstance(schema, dict):
            self.err(path, "a schema must be an object or a boolean")
            return
        for key, value in schema.items():
            here = f"{path}/{key}"
            if key not in ALLOWED_KEYWORDS:
                self.err(path, f"keyword {key!r} is not supported by the engine")
                continue
            self.used.add(key)
            if key == "type":
                types = value if isinstance(value, list) else [value]
                if not types or any(t not in ALLOWED_TYPES for t in types):
                    self.err(here, f"bad type {value!r}")
                if isinstance(value, list):
                    self.used.add("type[]")
            elif key == "properties":
                for prop, sub in value.items():
                    self.walk(sub, f"{here}/{prop}")
            elif key == "additionalProperties":
                if isinstance(value, dict):
                    self.used.add("additionalProperties{}")
                    self.walk(value, here)
                elif value is False:
                    self.used.add("additionalProperties:false")
            elif key == "items":
                if not isinstance(value, (dict, bool)):
                    self.err(here, "items must be a single schema")
                self.walk(value, here)
            elif key in ("anyOf", "oneOf"):
                for i, sub in enumerate(value):
                    self.walk(sub, f"{here}/{i}")
                if key == "oneOf":
                    self.check_one_of(value, here)
                if key == "anyOf" and len({frozenset(self.types_of(b) or ["?"]) for b in value}) > 1:
                    self.used.add("anyOf-types")
            elif key == "$defs":
                if not at_root:
                    self.err(here, "$defs only at the root")
                for def_name, sub in value.items():
                    self.walk(sub, f"{here}/{def_name}")
            elif key == "$ref":
                if not isinstance(value, str) or not re.fullmatch(r"#/\$defs/[A-Za-z0-9_]+", value):
                    self.err(here, f"$ref must be #/$defs/NAME, not {value!r}")
                elif value[len("#/$defs/"):] not in self.root.get("$defs", {}):
                    self.err(here, f"$ref to undefined {value!r}")
            elif key == "format":
                if value not in ALLOWED_FORMATS:
                    self.err(here, f"format {value!r} is not supported")
                self.used.add(f"format:{value}")
            elif key == "pattern":
                self.check_pattern(value, here)
            elif key == "enum":
                if not value or len({_tag(v) for v in value}) != len(value):
                    self.err(here, "enum must be non-empty without repeats")
                self.used.update(f"enum:{_json_type(v)}" for v in value)
            elif key == "maxItems" and value > MAX_ITEMS_LIMIT:
                self.err(here, f"maxItems over {MAX_ITEMS_LIMIT}: a small model may not finish")
            elif key == "maxLength" and value > MAX_LENGTH_LIMIT:
                self.err(here, f"maxLength over {MAX_LENGTH_LIMIT}: a small model may not finish")
        if "minItems" in schema and "maxItems" in schema and schema["minItems"] > schema["maxItems"]:
            self.err(path, "minItems > maxItems")
        if "minLength" in schema and "maxLength" in schema and schema["minLength"] > schema["maxLength"]:
            self.err(path, "minLength > maxLength")
        types = self.types_of(schema) or set()
        if "array" in types and "maxItems" not in schema:
            self.err(path, "array without maxItems")
        if "string" in types and not ({"maxLength", "pattern", "format", "enum", "const"} & set(schema)):
            self.err(path, "string without maxLength, pattern or format")
        for req in schema.get("required", []):
            if req not in schema.get("properties", {}) and schema.get("additionalProperties", True) is False:
                self.err(path, f"required {req!r} can never be present")
        optional = set(schema.get("properties", {})) - set(schema.get("required", []))
        if optional:
            self.used.add("optional-property")

    def check_pattern(self, pattern, path):
        if not (pattern.startswith("^") and pattern.endswith("$") and not _escaped_at(pattern, len(pattern) - 1)):
            self.err(path, "pattern must be anchored ^...$ (JSON Schema patterns are unanchored searches)")
        try:
            atoms = parse_regex_subset(pattern)
            re.compile(pattern)
        except (RegexSubsetError, re.error) as e:
            self.err(path, str(e))
            return
        bad = {c for c in UNSAFE_PATTERN_CHARS for atom in atoms if atom(c)}
        if bad:
            named = [repr(c) for c in ('"', "\\") if c in bad] + (["control characters"] if bad - {'"', "\\"} else [])
            self.err(path, f"pattern {pattern!r} allows {', '.join(named)} (use explicit classes, not . or [^...])")

    def types_of(self, schema):
        schema = self.resolve(schema)
        if not isinstance(schema, dict):
            return None
        if "type" in schema:
            t = schema["type"]
            return set(t if isinstance(t, list) else [t])
        if "const" in schema:
            return {_json_type(schema["const"])}
        if "enum" in schema:
            return {_json_type(v) for v in schema["enum"]}
        return None

    def values_of(self, schema):
        schema = self.resolve(schema)
        if isinstance(schema, dict):
            if "const" in schema:
                return {_tag(schema["const"])}
            if "enum" in schema:
                return {_tag(v) for v in schema["enum"]}
        return None

    def disjoint(self, a, b):
        ta, tb = self.types_of(a), self.types_of(b)
        if ta is not None and tb is not None:
            widen = lambda ts: ts | ({"number"} if "integer" in ts else set()) | ({"integer"} if "number" in ts else set())
            if not widen(ta) & widen(tb):
                return True
        va, vb = self.values_of(a), self.values_of(b)
        if va is not None and vb is not None and not va & vb:
            return True
        ra, rb = self.resolve(a), self.resolve(b)
        if isinstance(ra, dict) and isinstance(rb, dict):
            shared = set(ra.get("required", [])) & set(rb.get("required", []))
            for prop in shared:
                pa, pb = ra.get("properties", {}).get(prop), rb.get("properties", {}).get(prop)
                if pa is not None and pb is not None and self.disjoint(pa, pb):
                    return True
        return False

    def check_one_of(self, branches, path):
        for i in range(len(branches)):
            for j in range(i + 1, len(branches)):
                if not self.disjoint(branches[i], branches[j]):
                    self.err(path, f"oneOf branches {i} and {j} may both match")

    def check_refs_acyclic(self):
        defs = self.root.get("$defs", {})

        def refs_in(node):
            if isinstance(node, dict):
                if isinstance(node.get("$ref"), str):
                    yield node["$ref"][len("#/$defs/"):]
                for key, value in node.items():
                    if key not in ("enum", "const", "examples", "default"):
                        yield from refs_in(value)
            elif isinstance(node, list):
                for value in node:
                    yield from refs_in(value)

        def visit(name, stack):
            if name in stack:
                self.err("/$defs", f"recursive $ref through {' -> '.join(stack + [name])}")
                return
            for ref in refs_in(defs.get(name, {})):
                visit(ref, stack + [name])

        for name in defs:
            visit(name, [])

    def check_annotations(self):
        """examples and default must validate against the schema they annotate (where it has no $ref inside)."""
        def has_ref(node):
            return "$ref" in json.dumps(node)

        def visit(node, path):
            if not isinstance(node, dict):
                return
            for key in ("examples", "default"):
                if key in node and (node is self.root or not has_ref(node)):
                    subject = {k: v for k, v in node.items() if k not in ("examples", "default")}
                    values = node[key] if key == "examples" else [node[key]]
                    for value in values:
                        why = check_schema_output(subject, json.dumps(value))
                        if why:
                            self.err(path, f"{key} value {value!r} is invalid: {why}")
            for key, value in node.items():
                if key in ("properties", "$defs"):
                    for sub_name, sub in value.items():
                        visit(sub, f"{path}/{key}/{sub_name}")
                elif key in ("items", "additionalProperties"):
                    visit(value, f"{path}/{key}")
                elif key in ("anyOf", "oneOf"):
                    for i, sub in enumerate(value):
                        visit(sub, f"{path}/{key}/{i}")

        visit(self.root, "")


def _long_keys(schema):
    found = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("properties", "$defs"):
                found += [p for p in value if key == "properties" and len(p) >= LONG_KEY]
                for sub in value.values():
                    found += _long_keys(sub)
            elif key in ("items", "additionalProperties"):
                found += _long_keys(value)
            elif key in ("anyOf", "oneOf"):
                for sub in value:
                    found += _long_keys(sub)
    return found


def _load_corpus(path, key, minimum, errors):
    try:
        with open(path, encoding="utf-8") as f:
            cases = json.load(f)
    except (OSError, ValueError) as e:
        errors.append(f"{path}: {e}")
        return []
    if not isinstance(cases, list) or len(cases) < minimum:
        errors.append(f"{path}: want a JSON array of at least {minimum} cases")
        return []
    names = set()
    for i, case in enumerate(cases):
        if not isinstance(case, dict) or not isinstance(case.get("name"), str) or key not in case:
            errors.append(f"{path}: case {i} needs a name and a {key}")
            continue
        if not isinstance(case.get("prompt"), str) or not case["prompt"].strip():
            errors.append(f"{path}: case {case['name']} needs a prompt")
        if case["name"] in names:
            errors.append(f"{path}: duplicate name {case['name']!r}")
        names.add(case["name"])
    return [c for c in cases if isinstance(c, dict) and key in c and isinstance(c.get("name"), str)]


REQUIRED_COVERAGE = {
    "properties", "required", "additionalProperties:false", "additionalProperties{}", "enum", "const", "items",
    "minItems", "maxItems", "anyOf", "anyOf-types", "oneOf", "minLength", "maxLength", "pattern", "$ref", "$defs",
    "type[]", "enum:string", "enum:integer", "optional-property",
    "format:date", "format:time", "format:date-time", "format:email", "format:uuid",
}


def self_test(data_dir):
    errors, used = [], set()
    schemas_path = os.path.join(data_dir, "schemas.json")
    schemas = _load_corpus(schemas_path, "schema", 32, errors)
    long_key_schemas = []
    for case in schemas:
        schema = case["schema"]
        try:
            Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as e:
            errors.append(f"schema {case['name']}: not valid Draft 2020-12: {e.message}")
            continue
        linter = SchemaLinter(case["name"], schema)
        linter.walk(schema, at_root=True)
        linter.check_refs_acyclic()
        linter.check_annotations()
        errors += linter.errors
        used |= linter.used
        if len(_long_keys(schema)) >= 3:
            long_key_schemas.append(case["name"])
    missing = REQUIRED_COVERAGE - used
    if schemas and missing:
        errors.append(f"{schemas_path}: no schema uses {', '.join(sorted(missing))}")
    if schemas and (len(long_key_schemas) < 3 or "long_fixed_keys" not in long_key_schemas):
        errors.append(f"{schemas_path}: want 3 schemas with 3+ property names of {LONG_KEY}+ characters, "
                      f"one named long_fixed_keys (have {long_key_schemas})")

    regexes_path = os.path.join(data_dir, "regexes.json")
    regexes = _load_corpus(regexes_path, "regex", 16, errors)
    for case in regexes:
        name, regex = case["name"], case["regex"]
        try:
            parse_regex_subset(regex)
            compile_regex(regex)
        except (RegexSubsetError, re.error) as e:
            errors.append(f"regex {name}: {e}")
            continue
        for key, want in (("matches", True), ("non_matches", False)):
            examples = case.get(key)
            if not isinstance(examples, list) or len(examples) < 3:
                errors.append(f"regex {name}: want at least 3 {key}")
                continue
            for example in examples:
                if (check_regex_output(regex, example) is None) != want:
                    errors.append(f"regex {name}: {example!r} should {'' if want else 'not '}match {regex!r}")
    for line in errors:
        print(f"FAIL {line}")
    print(f"self-test: {len(schemas)} schemas, {len(regexes)} regexes, {len(errors)} problems")
    return not errors and bool(schemas) and bool(regexes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="?", help="JSON-lines file of outputs to check ('-' for stdin)")
    parser.add_argument("--self-test", action="store_true", help="check the corpus in --data-dir instead")
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help=f"corpus folder (default {DEFAULT_DATA_DIR})")
    args = parser.parse_args(argv)
    if args.self_test:
        return 0 if self_test(args.data_dir) else 1
    if not args.cases:
        parser.error("give a CASES_FILE or --self-test")
    if args.cases == "-":
        return 0 if check_cases(sys.stdin) else 1
    with open(args.cases, encoding="utf-8") as f:
        return 0 if check_cases(f) else 1


if __name__ == "__main__":
    sys.exit(main())
