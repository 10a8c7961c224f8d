"""The program a lint run reads: the script and the local modules it imports, as Python would find
them in the pod.

- **Which modules**: from each entry file, every `import` and `from ... import` is looked up in the
  search roots, in Python's order: the script's own folder (for `-m`, the working folder), the spec's
  `PYTHONPATH`, then the workspace root; a relative import from the importing file's package. What
  is found there is read and followed in turn; what is not (the standard library, torch, any
  installed package) is not. A relative import, or a submodule of a local package, that is not there
  is a note, not a crash.
- **Names across files**: `from utils import save_on_master`, `import utils` then
  `utils.save_on_master(...)`, `from . import helpers` and `from .helpers import *` all resolve a call
  to the function it runs, so a helper's parameters take what its callers pass (in any file), a call
  takes what the function returns, and a function's guard is judged over every call in the program.
- **Attributes of a namespace** (`args.rank`, `args.gpu`, `cfg.local_rank`): an attribute of
  anything but `self` that its own scope never assigns takes every assignment to that attribute
  name in the program (`args.gpu = int(os.environ["LOCAL_RANK"])` in a helper that gets `args`).
- **argparse**: each `add_argument("--flag", ...)` gives its destination's default (`store_true` is
  False), what a flag keeps when torchrun starts the script without it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ddpctl.lint import source
from ddpctl.lint.index import NONE, FunctionNode, Index, const_str, dotted, last_name
from ddpctl.records import record

MAX_MODULES = 2000
SPAWNS = frozenset({"spawn", "start_processes"})


@record
class Layout:
    """How many nodes the job has and how many processes each runs; None: not known (a standalone
    `ddpctl lint` assumes several of both)."""

    nodes: int | None = None
    procs_per_node: int | None = None

    @property
    def multi_node(self) -> bool:
        return self.nodes is None or self.nodes > 1

    @property
    def multi_process(self) -> bool:
        return self.procs_per_node is None or self.procs_per_node > 1


UNKNOWN_LAYOUT = Layout()


@dataclass
class Module:
    """One file of the program: its dotted name (`__main__` for a script), its source and index."""

    name: str
    src: source.Source
    idx: Index
    package: str  # the package its relative imports start from
    bound: dict[str, tuple[Module, str | None]] = field(default_factory=dict)  # local name -> (module, attr)
    stars: list[Module] = field(default_factory=list)  # `from X import *`
    top: dict[str, FunctionNode] = field(default_factory=dict)  # its module-level functions


@record
class Argument:
    """An argparse argument: its destination and the value it keeps when not given."""

    dest: str
    default: ast.expr | None  # None: the argument's default is None
    call: ast.Call
    module: Module


def _dest(call: ast.Call) -> str | None:
    explicit = next((k.value for k in call.keywords if k.arg == "dest"), None)
    if explicit is not None:
        return const_str(explicit)
    flags = [const_str(a) for a in call.args]
    long = next((f for f in flags if f and f.startswith("--")), None)
    short = next((f for f in flags if f and not f.startswith("-")), None)  # a positional argument
    name = long[2:] if long else short
    return name.replace("-", "_") if name else None


def _default(call: ast.Call) -> ast.expr | None:
    given = next((k.value for k in call.keywords if k.arg == "default"), None)
    if given is not None:
        return given
    action = const_str(next((k.value for k in call.keywords if k.arg == "action"), None))
    if action == "store_true":
        return ast.Constant(False)
    if action == "store_false":
        return ast.Constant(True)
    return None


class Program:
    """The modules of one program, and what the rules ask across them (see the module's docstring)."""

    def __init__(self, modules: list[Module], notes: list[str]) -> None:
        self.modules = modules
        self.notes = notes
        self.by_index: dict[int, Module] = {id(m.idx): m for m in modules}
        self.sites: dict[tuple[int, str], list[tuple[Module, ast.Call, int]]] = {}  # (module, fn) -> calls
        self.attrs: dict[str, list[tuple[Module, ast.expr]]] = {}  # `X.attr = value`, X not self
        self.arguments: dict[str, Argument] = {}
        self._params: dict[tuple[int, str], frozenset[str]] = {}
        self._returns: dict[tuple[int, int | None], frozenset[str]] = {}
        for module in modules:
            module.idx.program = self
            module.top = {
                f.name: f
                for fs in module.idx.functions.values()
                for f in fs
                if module.idx.parent.get(f) is module.idx.tree
            }
        for module in modules:
            self._collect(module)

    # ------------------------------------------------------------------ what is collected once
    def _collect(self, module: Module) -> None:
        idx = module.idx
        for call in idx.calls:
            target = self.resolve_call(module, call.func)
            if target is not None:
                self.sites.setdefault((id(target[0]), target[1].name), []).append((module, call, 0))
            if last_name(call.func) in SPAWNS and call.args:  # mp.spawn(fn, args=(...)): fn(i, *args)
                spawned = self.resolve_call(module, call.args[0])
                if spawned is not None:
                    self.sites.setdefault((id(spawned[0]), spawned[1].name), []).append((module, call, 1))
            if last_name(call.func) == "add_argument":
                dest = _dest(call)
                if dest and dest not in self.arguments:
                    self.arguments[dest] = Argument(dest, _default(call), call, module)
        for (_, key), values in idx.assigned.items():
            if "." in key:
                base, attr = key.rsplit(".", 1)
                if base != "self" and not base.startswith("self."):
                    self.attrs.setdefault(attr, []).extend((module, v) for v in values)

    # ------------------------------------------------------------------ names across modules
    def module_of(self, idx: Index) -> Module:
        return self.by_index[id(idx)]

    def _lookup(self, module: Module, name: str, depth: int = 0) -> tuple[Module, FunctionNode] | None:
        if name in module.top:
            return module, module.top[name]
        bound = module.bound.get(name)
        if bound is not None and bound[1] is not None and depth < 8:
            return self._lookup(bound[0], bound[1], depth + 1)
        if depth < 8:
            for star in module.stars:
                found = self._lookup(star, name, depth + 1)
                if found:
                    return found
        return None

    def _module_value(self, module: Module, expr: ast.AST) -> Module | None:
        """The module an expression names: `utils` after `import utils`, `pkg.sub` after `import pkg.sub`."""
        if isinstance(expr, ast.Name):
            bound = module.bound.get(expr.id)
            return bound[0] if bound is not None and bound[1] is None else None
        if isinstance(expr, ast.Attribute):
            base = self._module_value(module, expr.value)
            if base is None:
                return None
            sub = base.bound.get(expr.attr)
            return sub[0] if sub is not None and sub[1] is None else None
        return None

    def resolve_call(self, module: Module, func: ast.AST) -> tuple[Module, FunctionNode] | None:
        """The program's module-level function that `func` names, if any."""
        if isinstance(func, ast.Name):
            if func.id in module.top:
                return module, module.top[func.id]
            if func.id in module.bound or module.stars:
                return self._lookup(module, func.id)
            return None
        if isinstance(func, ast.Attribute):
            owner = self._module_value(module, func.value)
            if owner is not None:
                return self._lookup(owner, func.attr)
        return None

    def calls_of(self, module: Module, function: FunctionNode) -> list[tuple[Module, ast.Call, int]]:
        return self.sites.get((id(module), function.name), [])

    # ------------------------------------------------------------------ values across modules
    def param_kinds(self, idx: Index, function: FunctionNode, name: str) -> frozenset[str]:
        """What the callers pass for parameter `name` of `function`, in any module."""
        module = self.module_of(idx)
        memo = (id(function), name)
        if memo in self._params:
            return self._params[memo]
        self._params[memo] = NONE
        params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
        position = params.index(name) if name in params else None
        found: set[str] = set()
        for caller, call, shift in self.calls_of(module, function):
            if shift:  # spawned: the process index (not a rank of torchrun's) comes first
                if position is None or position == 0:
                    continue
                given = next((k.value for k in call.keywords if k.arg == "args"), None)
                if isinstance(given, ast.Tuple) and position - 1 < len(given.elts):
                    found |= caller.idx.kinds(given.elts[position - 1])
                continue
            value = next((k.value for k in call.keywords if k.arg == name), None)
            if (
                value is None
                and position is not None
                and position < len(call.args)
                and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1])
            ):
                value = call.args[position]
            if value is not None:
                found |= caller.idx.kinds(value)
        result = frozenset(found)
        self._params[memo] = result
        return result

    def return_kinds(self, idx: Index, call: ast.Call, item: int | None = None) -> frozenset[str] | None:
        """What the program's function that `call` runs returns (its element `item` of a tuple);
        None when `call` runs no function of the program."""
        target = self.resolve_call(self.module_of(idx), call.func)
        if target is None:
            return None
        module, function = target
        memo = (id(function), item)
        if memo in self._returns:
            return self._returns[memo]
        self._returns[memo] = NONE
        found: set[str] = set()
        for ret in module.idx.returns.get(function, ()):
            value = ret.value
            if item is not None and isinstance(value, ast.Tuple):
                value = value.elts[item] if item < len(value.elts) else None
            found |= module.idx.kinds(value)
        result = frozenset(found)
        self._returns[memo] = result
        return result

    def attr_values(self, attr: str) -> list[tuple[Module, ast.expr]]:
        return self.attrs.get(attr, [])

    def attr_kinds(self, attr: str) -> frozenset[str]:
        memo = (0, "." + attr)
        if memo in self._params:
            return self._params[memo]
        self._params[memo] = NONE
        result = frozenset().union(*(m.idx.kinds(v) for m, v in self.attr_values(attr)))
        self._params[memo] = result
        return result

    def argument(self, expr: ast.AST) -> Argument | None:
        """The argparse argument `args.flag` reads, when nothing in the program assigns `X.flag`."""
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id != "self":
            found = self.arguments.get(expr.attr)
            if found is not None and not self.attr_values(expr.attr):
                return found
        return None

    def reads_attr(self, attr: str) -> bool:
        """Whether any module reads `X.attr` (of anything but self)."""
        return any(attr in m.idx.attr_reads for m in self.modules)


# ---------------------------------------------------------------------------------------- loading


def _candidates(base: Path, parts: Sequence[str]) -> Iterator[Path]:
    if not parts:
        yield base / "__init__.py"
        return
    yield base.joinpath(*parts).with_suffix(".py")
    yield base.joinpath(*parts, "__init__.py")


class Loader:
    """Reads the program: the entry files, then every local module they import, breadth first."""

    def __init__(self, roots: Sequence[Path], cwd: Path, read: dict[Path, source.Source] | None = None) -> None:
        self.roots = [r.resolve() for r in roots if r.is_dir()]
        self.cwd = cwd
        self.read = {p.resolve(): s for p, s in (read or {}).items()}  # sources already read (or fixed)
        self.by_path: dict[Path, Module] = {}
        self.modules: list[Module] = []
        self.notes: list[str] = []
        self.todo: list[Module] = []

    def _name(self, path: Path) -> tuple[str, str]:
        """The dotted name of a file under a root, and its package."""
        for root in self.roots:
            try:
                parts = list(path.relative_to(root).with_suffix("").parts)
            except ValueError:
                continue
            package = parts[:-1]
            if parts[-1] == "__init__":
                parts = parts[:-1]
                package = parts
            return ".".join(parts), ".".join(package)
        return path.stem, ""

    def add(self, path: Path) -> Module:
        key = path.resolve()
        if key in self.by_path:
            return self.by_path[key]
        from ddpctl.lint.files import display as shown

        src = self.read.get(key) or source.load(path, shown(path, self.cwd))
        name, package = self._name(key)
        module = Module(name, src, Index(src.tree), package)
        self.by_path[key] = module
        self.modules.append(module)
        self.todo.append(module)
        return module

    def find(self, name: str, base: Path | None = None) -> Path | None:
        parts = [p for p in name.split(".") if p]
        for root in [base] if base is not None else self.roots:
            for candidate in _candidates(root, parts):
                if candidate.is_file():
                    return candidate
        return None

    def _relative_base(self, module: Module, level: int) -> Path:
        folder = module.src.path.resolve().parent
        for _ in range(level - 1):
            folder = folder.parent
        return folder

    def _note(self, module: Module, node: ast.AST, what: str) -> None:
        self.notes.append(
            f"{module.src.display}:{getattr(node, 'lineno', 1)}: local module {what} not found: not followed"
        )

    def _local_top(self, name: str) -> bool:
        top = name.split(".")[0]
        return any((root / top).is_dir() for root in self.roots)

    def follow(self, module: Module) -> None:
        for node in module.idx.import_nodes:
            if len(self.modules) >= MAX_MODULES:
                return
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._import(module, node, alias)
            else:
                self._import_from(module, node)

    def _import(self, module: Module, node: ast.Import, alias: ast.alias) -> None:
        parts = alias.name.split(".")
        chain: list[Module] = []
        for i in range(1, len(parts) + 1):
            path = self.find(".".join(parts[:i]))
            if path is None:
                if chain:
                    self._note(module, node, alias.name)
                break
            chain.append(self.add(path))
        if not chain:
            return
        for parent, child, part in zip(chain, chain[1:], parts[1:]):
            parent.bound.setdefault(part, (child, None))
        if alias.asname:
            if len(chain) == len(parts):
                module.bound[alias.asname] = (chain[-1], None)
        else:
            module.bound[parts[0]] = (chain[0], None)

    def _package_dir(self, name: str, base: Path | None) -> Path | None:
        """The folder of package `name` (a namespace folder without `__init__.py` too)."""
        parts = [p for p in name.split(".") if p]
        for root in [base] if base is not None else self.roots:
            folder = root.joinpath(*parts)
            if folder.is_dir() and (parts or base is not None):
                return folder
        return None

    def _import_from(self, module: Module, node: ast.ImportFrom) -> None:
        name = node.module or ""
        base = self._relative_base(module, node.level) if node.level else None
        path = self.find(name, base)
        folder = self._package_dir(name, base)
        target = self.add(path) if path is not None else None
        if target is None and folder is None:
            if node.level or self._local_top(name):
                self._note(module, node, "." * node.level + name)
            return
        for alias in node.names:
            if alias.name == "*":
                if target is not None:
                    module.stars.append(target)
                continue
            local = alias.asname or alias.name
            sub = self.find(alias.name, folder) if folder is not None else None
            if sub is not None and (target is None or sub.resolve() != target.src.path.resolve()):
                child = self.add(sub)
                module.bound[local] = (child, None)
                if target is not None:
                    target.bound.setdefault(alias.name, (child, None))
            elif target is not None:
                module.bound[local] = (target, alias.name)
            elif node.level:
                self._note(module, node, "." * node.level + (f"{name}.{alias.name}" if name else alias.name))

    def load(self) -> list[Program]:
        """The programs read: the modules linked by imports (either way) are one program; two
        scripts that share nothing are two."""
        while self.todo:
            self.follow(self.todo.pop(0))
        if len(self.modules) >= MAX_MODULES:
            self.notes.append(f"more than {MAX_MODULES} local modules: the rest were not followed")
        position = {id(m): i for i, m in enumerate(self.modules)}
        group = list(range(len(self.modules)))

        def find(i: int) -> int:
            while group[i] != i:
                group[i] = group[group[i]]
                i = group[i]
            return i

        for i, module in enumerate(self.modules):
            for other in [*(b[0] for b in module.bound.values()), *module.stars]:
                j = position.get(id(other))
                if j is not None:
                    group[find(i)] = find(j)
        members: dict[int, list[Module]] = {}
        for i, module in enumerate(self.modules):
            members.setdefault(find(i), []).append(module)
        programs = [Program(ms, []) for ms in members.values()]
        if programs:
            programs[0].notes.extend(self.notes)
        return programs


def roots_for(entries: Sequence[Path], cwd: Path, extra: Sequence[Path] = (), module_entry: bool = False) -> list[Path]:
    """Python's search path in the pod: each script's folder (the working folder for `-m`) first,
    then `extra` (the spec's PYTHONPATH), then `cwd` (the workspace root)."""
    roots: list[Path] = []
    for folder in [cwd if module_entry else e.resolve().parent for e in entries] + [*extra, cwd]:
        if folder.resolve() not in roots:
            roots.append(folder.resolve())
    return roots


def load(
    entries: Sequence[Path],
    cwd: Path,
    extra_roots: Sequence[Path] = (),
    module_entry: bool = False,
    read: dict[Path, source.Source] | None = None,
) -> list[Program]:
    """The programs of these entry files (see `roots_for` for where imports are looked up)."""
    loader = Loader(roots_for(entries, cwd, extra_roots, module_entry), cwd, read)
    for entry in entries:
        loader.add(entry)
    return loader.load()


def dotted_attr(expr: ast.AST) -> str | None:
    """`gpu` of `args.gpu` (an attribute of anything but self)."""
    key = dotted(expr)
    if key and "." in key and not key.startswith("self."):
        return key.rsplit(".", 1)[1]
    return None


def program_of(idx: Index) -> Program | None:
    """The Program `idx` is read in (the Program sets itself as the index's resolver), if any."""
    program = idx.program
    return program if isinstance(program, Program) else None
