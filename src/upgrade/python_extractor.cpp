#include "upgrade/python_extractor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "probes/library_finder.h"

namespace eacgm::upgrade {
namespace {

// Run as `python -I -S -c SCRIPT ROOT...` (isolated: the scanned project's own `ast.py` or
// `json.py` in the working directory cannot shadow the standard library). stdin: the files,
// each ended by a NUL byte. stdout: one JSON object a line, ASCII only: {"t": "use", "f": FILE
// INDEX, "l": LINE, "c": COLUMN, "n": NAME, "k": call|ref|import, "fn": QUALNAME, "fl": FIRST
// LINE, calls: "kw": [[NAME, LINE, COLUMN]...], "na": POSITIONALS, "sa": *args, "sk": **kwargs},
// {"t": "file", "f": I} once a file is done, {"t": "warn", "f": I, "l": LINE, "m": WHY} for a
// file it could not read or parse, and {"t": "done", "version": "3.11.7"} at the end. A file's
// uses are printed only once it was walked whole.
//
// Resolution: imports bind names (`import a.b as c`, `from a import b as c`; relative imports
// and `import *` bind nothing known), and so does an assignment of a dotted name (`K =
// tf.keras`); any other binding (assignment, parameter, def, class, loop or with target, except
// name, match capture) hides what a name stood for. Scopes follow Python's rules: a function's
// locals are the names bound anywhere in it, class bodies are not seen from their methods,
// comprehensions and lambdas have their own, `global` binds in the module. Module code is
// followed statement by statement; code in functions sees the module's final bindings (it runs
// later), learned by a first pass. A name is reported once per expression, whole: `T.cuda.amp.
// autocast(...)` is one use of torch.cuda.amp.autocast. Strings, comments and docstrings are
// not names, so they are never uses.
constexpr std::string_view kExtractor = R"PY(
import ast
import json
import os
import sys

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def argument_names(args):
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    for extra in (args.vararg, args.kwarg):
        if extra is not None:
            names.append(extra.arg)
    return names


def outer_parts(node):
    # The parts of a node that opens a scope which run in the enclosing scope; None for others.
    if isinstance(node, FUNCTIONS):
        a = node.args
        parts = list(node.decorator_list) + list(a.defaults)
        parts += [d for d in a.kw_defaults if d is not None]
        for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
            if arg is not None and arg.annotation is not None:
                parts.append(arg.annotation)
        if node.returns is not None:
            parts.append(node.returns)
        return parts
    if isinstance(node, ast.Lambda):
        return list(node.args.defaults) + [d for d in node.args.kw_defaults if d is not None]
    if isinstance(node, ast.ClassDef):
        return list(node.decorator_list) + list(node.bases) + [k.value for k in node.keywords]
    if isinstance(node, COMPREHENSIONS):
        return [node.generators[0].iter]
    return None


def scope_names(body):
    # Names bound anywhere in a scope's own code, and those it declares global or nonlocal.
    bound, globals_, nonlocals = set(), set(), set()
    stack = list(body)
    while stack:
        node = stack.pop()
        outer = outer_parts(node)
        if outer is not None:
            if isinstance(node, FUNCTIONS) or isinstance(node, ast.ClassDef):
                bound.add(node.name)
            stack.extend(outer)
            continue
        kind = type(node).__name__
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.Global):
            globals_.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            nonlocals.update(node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                bound.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name != "*":
                    bound.add(a.asname or a.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif kind in ("MatchAs", "MatchStar") and node.name:
            bound.add(node.name)
        elif kind == "MatchMapping" and node.rest:
            bound.add(node.rest)
        stack.extend(ast.iter_child_nodes(node))
    return bound, globals_, nonlocals


class Scope(object):
    def __init__(self, kind, parent, qualname, first_line, local_names, global_names):
        self.kind = kind  # module, function, lambda, class, comprehension
        self.parent = parent
        self.qualname = qualname  # of the def or class findings are reported in
        self.first_line = first_line
        self.local_names = local_names
        self.global_names = global_names
        self.bindings = {}  # name -> the dotted name it stands for, or None


class Walker(object):
    def __init__(self, roots, lines, records, final_module):
        self.roots = roots
        self.lines = lines
        self.records = records  # None: a first pass that only learns the module's bindings
        self.final_module = final_module
        self.module = Scope("module", None, "<module>", 0, set(), set())

    def walk(self, tree):
        for stmt in tree.body:
            self.visit(stmt, self.module)

    # Names.
    def resolve(self, name, scope):
        # Code in a function runs after the module has run: it sees the module's final bindings.
        deferred = False
        s = scope
        while s is not None:
            if s.kind == "module":
                table = s.bindings
                if deferred and self.final_module is not None:
                    table = self.final_module
                return table.get(name)
            if name in s.global_names:
                s = self.module
                continue
            # A class body's names are seen by its own code only, not by the functions in it.
            if (s.kind != "class" or s is scope) and name in s.local_names:
                return s.bindings.get(name)
            if s.kind in ("function", "lambda"):
                deferred = True
            s = s.parent
        return None

    def bind(self, scope, name, value):
        if name in scope.global_names:
            scope = self.module
        scope.bindings[name] = value

    def dotted(self, node, scope):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.resolve(node.id, scope)
        if base is None:
            return None
        parts.append(base)
        return ".".join(reversed(parts))

    def column(self, line, offset):
        # ast gives UTF-8 byte offsets; people count characters, from 1.
        if self.lines is None or not 0 < line <= len(self.lines):
            return offset + 1
        text = self.lines[line - 1]
        if text.isascii():
            return offset + 1
        return len(text.encode("utf-8")[:offset].decode("utf-8", "replace")) + 1

    def use(self, node, name, kind, scope, call=None):
        if self.records is None or name.split(".", 1)[0] not in self.roots:
            return
        record = {"t": "use", "l": node.lineno, "c": self.column(node.lineno, node.col_offset),
                  "n": name, "k": kind, "fn": scope.qualname, "fl": scope.first_line}
        if call is not None:
            record.update(call)
        self.records.append(record)

    def child_qualname(self, scope, name):
        while scope.kind in ("lambda", "comprehension"):
            scope = scope.parent
        if scope.kind == "module":
            return name
        if scope.kind == "function":
            return scope.qualname + ".<locals>." + name
        return scope.qualname + "." + name

    # The walk.
    def visit(self, node, scope):
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            for child in ast.iter_child_nodes(node):
                self.visit(child, scope)
        else:
            method(node, scope)

    def visit_Import(self, node, scope):
        for a in node.names:
            if a.asname:
                self.bind(scope, a.asname, a.name)
            else:
                head = a.name.split(".")[0]
                self.bind(scope, head, head)
            self.use(node, a.name, "import", scope)

    def visit_ImportFrom(self, node, scope):
        for a in node.names:
            if a.name == "*":
                continue
            if node.level or not node.module:
                self.bind(scope, a.asname or a.name, None)
                continue
            full = node.module + "." + a.name
            self.bind(scope, a.asname or a.name, full)
            self.use(node, full, "import", scope)

    def alias_assignment(self, targets, value, scope):
        # `K = tf.keras`: K stands for tensorflow.keras from here on.
        alias = None
        if isinstance(value, (ast.Name, ast.Attribute)):
            alias = self.dotted(value, scope)
        if value is not None:
            self.visit(value, scope)
        for target in targets:
            self.visit(target, scope)
        if alias is not None:
            for target in targets:
                if isinstance(target, ast.Name):
                    self.bind(scope, target.id, alias)

    def visit_Assign(self, node, scope):
        self.alias_assignment(node.targets, node.value, scope)

    def visit_AnnAssign(self, node, scope):
        self.visit(node.annotation, scope)
        self.alias_assignment([node.target], node.value, scope)

    def visit_Name(self, node, scope):
        if isinstance(node.ctx, ast.Load):
            full = self.resolve(node.id, scope)
            if full is not None:
                self.use(node, full, "ref", scope)
        else:
            self.bind(scope, node.id, None)

    def visit_Attribute(self, node, scope):
        full = self.dotted(node, scope)
        if full is not None:
            self.use(node, full, "ref", scope)
            return
        inner = node.value
        while isinstance(inner, ast.Attribute):
            inner = inner.value
        if not isinstance(inner, ast.Name):
            self.visit(inner, scope)

    def visit_Call(self, node, scope):
        full = None
        if isinstance(node.func, (ast.Name, ast.Attribute)):
            full = self.dotted(node.func, scope)
        if full is None:
            self.visit(node.func, scope)
        else:
            keywords = []
            for k in node.keywords:
                if k.arg is not None:
                    line = getattr(k, "lineno", k.value.lineno)
                    offset = getattr(k, "col_offset", k.value.col_offset)
                    keywords.append([k.arg, line, self.column(line, offset)])
            positional = [a for a in node.args if not isinstance(a, ast.Starred)]
            self.use(node, full, "call", scope, {
                "kw": keywords, "na": len(positional),
                "sa": len(positional) != len(node.args),
                "sk": any(k.arg is None for k in node.keywords)})
        for a in node.args:
            self.visit(a, scope)
        for k in node.keywords:
            self.visit(k.value, scope)

    def visit_FunctionDef(self, node, scope):
        for part in outer_parts(node):
            self.visit(part, scope)
        self.bind(scope, node.name, None)
        bound, globals_, nonlocals = scope_names(node.body)
        local_names = (bound | set(argument_names(node.args))) - globals_ - nonlocals
        first_line = min([d.lineno for d in node.decorator_list] + [node.lineno])
        inner = Scope("function", scope, self.child_qualname(scope, node.name), first_line,
                      local_names, globals_)
        for stmt in node.body:
            self.visit(stmt, inner)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node, scope):
        for part in outer_parts(node):
            self.visit(part, scope)
        bound, globals_, nonlocals = scope_names(node.body)
        first_line = min([d.lineno for d in node.decorator_list] + [node.lineno])
        inner = Scope("class", scope, self.child_qualname(scope, node.name), first_line,
                      bound - globals_ - nonlocals, globals_)
        for stmt in node.body:
            self.visit(stmt, inner)
        self.bind(scope, node.name, None)

    def visit_Lambda(self, node, scope):
        for part in outer_parts(node):
            self.visit(part, scope)
        inner = Scope("lambda", scope, scope.qualname, scope.first_line,
                      set(argument_names(node.args)), set())
        self.visit(node.body, inner)

    def visit_comprehension_scope(self, node, scope):
        generators = node.generators
        self.visit(generators[0].iter, scope)
        names = set()
        for g in generators:
            for n in ast.walk(g.target):
                if isinstance(n, ast.Name):
                    names.add(n.id)
        inner = Scope("comprehension", scope, scope.qualname, scope.first_line, names, set())
        for i, g in enumerate(generators):
            if i:
                self.visit(g.iter, inner)
            self.visit(g.target, inner)
            for condition in g.ifs:
                self.visit(condition, inner)
        if isinstance(node, ast.DictComp):
            self.visit(node.key, inner)
            self.visit(node.value, inner)
        else:
            self.visit(node.elt, inner)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = \
        visit_comprehension_scope

    def visit_ExceptHandler(self, node, scope):
        if node.type is not None:
            self.visit(node.type, scope)
        if node.name:
            self.bind(scope, node.name, None)
        for stmt in node.body:
            self.visit(stmt, scope)

    def visit_MatchAs(self, node, scope):
        if node.pattern is not None:
            self.visit(node.pattern, scope)
        if node.name:
            self.bind(scope, node.name, None)

    def visit_MatchStar(self, node, scope):
        if node.name:
            self.bind(scope, node.name, None)

    def visit_MatchMapping(self, node, scope):
        for child in list(node.keys) + list(node.patterns):
            self.visit(child, scope)
        if node.rest:
            self.bind(scope, node.rest, None)


def text(value):
    return str(value).encode("utf-8", "replace").decode("utf-8")


def source_lines(data):
    try:
        import importlib.util
        return importlib.util.decode_source(data).split("\n")
    except Exception:
        return None


def scan(index, path, roots, out):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return {"t": "warn", "f": index, "l": 0, "m": "cannot read it: " + text(e.strerror or e)}
    try:
        tree = ast.parse(data, filename=os.fsdecode(path))
    except SyntaxError as e:
        return {"t": "warn", "f": index, "l": e.lineno or 0,
                "m": "SyntaxError: " + text(e.msg or "invalid syntax")}
    except (ValueError, MemoryError, RecursionError) as e:
        return {"t": "warn", "f": index, "l": 0, "m": "cannot parse it: " + text(e)}
    lines = source_lines(data)
    records = []
    try:
        first = Walker(roots, lines, None, None)
        first.walk(tree)
        Walker(roots, lines, records, first.module.bindings).walk(tree)
    except RecursionError:
        return {"t": "warn", "f": index, "l": 0, "m": "too deeply nested to follow"}
    for record in records:
        record["f"] = index
        out.write(json.dumps(record, separators=(",", ":")) + "\n")
    return {"t": "file", "f": index}


def main():
    if sys.version_info < (3, 8):
        sys.stderr.write("eacgm scan needs Python 3.8 or newer; this is Python %d.%d\n"
                         % sys.version_info[:2])
        return 3
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    roots = set(sys.argv[1:])
    paths = sys.stdin.buffer.read().split(b"\0")
    if paths and not paths[-1]:
        paths.pop()
    out = sys.stdout
    for index, path in enumerate(paths):
        out.write(json.dumps(scan(index, path, roots, out), separators=(",", ":")) + "\n")
    out.write(json.dumps({"t": "done", "version": "%d.%d.%d" % sys.version_info[:3]}) + "\n")
    out.flush()
    return 0


sys.exit(main())
)PY";

// The exit code the script uses for an interpreter older than 3.8.
constexpr int kTooOld = 3;

bool executable(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

int json_int(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int>() : 0;
}

std::string json_string(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool json_bool(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

// The line of an interpreter's stderr that says what went wrong: a traceback's last line (the
// exception), else the first (a usage error: "Unknown option: -I").
std::string telling_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.find("Traceback") != std::string::npos) {
    const size_t nl = text.rfind('\n');
    return nl == std::string::npos ? text : text.substr(nl + 1);
  }
  return text.substr(0, text.find('\n'));
}

// Closes the descriptors it holds.
struct PipeEnds {
  int fds[6] = {-1, -1, -1, -1, -1, -1};
  ~PipeEnds() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  void drop(int i) {
    if (fds[i] >= 0) close(fds[i]);
    fds[i] = -1;
  }
};

// SIGPIPE ignored while the script runs: a script that dies before reading its input must not
// kill eacgm when it writes the file list.
class IgnoreSigpipe {
 public:
  IgnoreSigpipe() { sigaction(SIGPIPE, &ignore_, &old_); }
  ~IgnoreSigpipe() { sigaction(SIGPIPE, &old_, nullptr); }
  IgnoreSigpipe(const IgnoreSigpipe&) = delete;
  IgnoreSigpipe& operator=(const IgnoreSigpipe&) = delete;

 private:
  struct sigaction ignore_ = make_ignore();
  struct sigaction old_ {};
  static struct sigaction make_ignore() {
    struct sigaction sa {};
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    return sa;
  }
};

}  // namespace

std::string_view python_extractor_source() { return kExtractor.substr(1); }

Result<std::string> find_python(const std::string& name) {
  if (name.empty()) return Error{"--python needs an interpreter"};
  if (name.find('/') != std::string::npos) {
    if (!executable(name)) {
      return Error{
          fmt::format("--python {}: {}", name,
                      access(name.c_str(), F_OK) == 0 ? "not executable" : "no such interpreter")};
    }
    return name;
  }
  for (const std::string& dir : program_search_dirs(std::getenv("PATH"))) {
    std::string candidate = fmt::format("{}/{}", dir, name);
    if (executable(candidate)) return candidate;
  }
  return Error{fmt::format(
      "no {} on PATH: eacgm scan parses Python with the job's own interpreter; name it with "
      "--python (e.g. --python /usr/bin/python3.11)",
      name)};
}

Result<void> read_extractor_line(std::string_view line, const std::vector<std::string>& files,
                                 Extraction& out, bool& done) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Error{"not a JSON object"};
  const std::string type = json_string(j, "t");
  if (type == "done") {
    out.python_version = json_string(j, "version");
    done = true;
    return {};
  }
  const int index = json_int(j, "f");
  if (index < 0 || static_cast<size_t>(index) >= files.size()) {
    return Error{fmt::format("file index {} out of range", index)};
  }
  const std::string& file = files[static_cast<size_t>(index)];
  if (type == "file") {
    ++out.files_parsed;
  } else if (type == "warn") {
    out.warnings.push_back({file, json_int(j, "l"), json_string(j, "m")});
  } else if (type == "use") {
    Use use;
    use.file = file;
    use.line = json_int(j, "l");
    use.column = json_int(j, "c");
    use.name = json_string(j, "n");
    if (use.name.empty()) return Error{"a use without a name"};
    const std::string kind = json_string(j, "k");
    use.kind = kind == "call"     ? Use::Kind::kCall
               : kind == "import" ? Use::Kind::kImport
                                  : Use::Kind::kRef;
    use.function = json_string(j, "fn");
    use.function_line = json_int(j, "fl");
    if (const auto kw = j.find("kw"); kw != j.end() && kw->is_array()) {
      for (const nlohmann::json& k : *kw) {
        if (!k.is_array() || k.size() != 3 || !k[0].is_string() || !k[1].is_number_integer() ||
            !k[2].is_number_integer()) {
          return Error{"a malformed keyword"};
        }
        use.keywords.push_back({k[0].get<std::string>(), k[1].get<int>(), k[2].get<int>()});
      }
    }
    use.positional = json_int(j, "na");
    use.star_args = json_bool(j, "sa");
    use.star_kwargs = json_bool(j, "sk");
    out.uses.push_back(std::move(use));
  } else {
    return Error{fmt::format("unknown record type '{}'", type)};
  }
  return {};
}

Result<Extraction> run_python_extractor(const std::string& python,
                                        const std::vector<std::string>& files,
                                        const std::vector<std::string>& roots) {
  std::string input;
  for (const std::string& f : files) {
    input += f;
    input += '\0';
  }
  const std::string script(python_extractor_source());
  std::vector<std::string> args = {python, "-I", "-S", "-c", script};
  args.insert(args.end(), roots.begin(), roots.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // [0,1] the script's stdin, [2,3] its stdout, [4,5] its stderr (read end first).
  PipeEnds p;
  for (int i = 0; i < 3; ++i) {
    if (pipe2(p.fds + 2 * i, O_CLOEXEC) != 0) {
      return Error{fmt::format("cannot create a pipe: {}", std::strerror(errno))};
    }
  }
  IgnoreSigpipe ignore_sigpipe;
  const pid_t pid = fork();
  if (pid < 0) return Error{fmt::format("cannot start {}: {}", python, std::strerror(errno))};
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec.
    signal(SIGPIPE, SIG_DFL);
    if (dup2(p.fds[0], 0) < 0 || dup2(p.fds[3], 1) < 0 || dup2(p.fds[5], 2) < 0) _exit(127);
    execv(python.c_str(), argv.data());
    const char* why = std::strerror(errno);
    (void)!write(2, "cannot run it: ", 15);
    (void)!write(2, why, std::strlen(why));
    (void)!write(2, "\n", 1);
    _exit(127);
  }
  p.drop(0);
  p.drop(3);
  p.drop(5);
  fcntl(p.fds[1], F_SETFL, O_NONBLOCK);

  Extraction out;
  std::string pending, errors, bad_line;
  bool done = false;
  size_t written = 0;
  if (input.empty()) p.drop(1);
  char buffer[65536];
  while (p.fds[2] >= 0 || p.fds[4] >= 0) {
    struct pollfd fds[3];
    nfds_t n = 0;
    for (int i : {1, 2, 4}) {
      if (p.fds[i] < 0) continue;
      fds[n].fd = p.fds[i];
      fds[n].events = i == 1 ? POLLOUT : POLLIN;
      fds[n].revents = 0;
      ++n;
    }
    if (poll(fds, n, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (nfds_t k = 0; k < n; ++k) {
      if (fds[k].revents == 0) continue;
      if (fds[k].fd == p.fds[1]) {
        const ssize_t w = write(p.fds[1], input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) p.drop(1);
        continue;
      }
      const bool is_out = fds[k].fd == p.fds[2];
      const ssize_t r = read(fds[k].fd, buffer, sizeof buffer);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (r <= 0) {
        p.drop(is_out ? 2 : 4);
        continue;
      }
      if (!is_out) {
        if (errors.size() < 65536) errors.append(buffer, static_cast<size_t>(r));
        continue;
      }
      pending.append(buffer, static_cast<size_t>(r));
      size_t start = 0;
      for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
        const std::string_view line(pending.data() + start, nl - start);
        if (auto ok = read_extractor_line(line, files, out, done); !ok && bad_line.empty()) {
          bad_line = fmt::format("{} in '{}'", ok.error().message, line.substr(0, 200));
        }
      }
      pending.erase(0, start);
    }
  }
  p.drop(1);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string why = telling_line(errors);
  if (WIFSIGNALED(status)) {
    return Error{fmt::format("{} was killed by signal {} while parsing the files", python,
                             WTERMSIG(status))};
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == kTooOld) return Error{fmt::format("{}: {}", python, why)};
  if (code != 0 || !done) {
    return Error{fmt::format(
        "{} could not run eacgm's parser (exit status {}{}{}); eacgm scan needs Python 3.8 or "
        "newer",
        python, code, why.empty() ? "" : ": ", why)};
  }
  if (!bad_line.empty()) {
    return Error{fmt::format("{} printed what eacgm's parser never prints: {}", python, bad_line)};
  }
  return out;
}

}  // namespace eacgm::upgrade
