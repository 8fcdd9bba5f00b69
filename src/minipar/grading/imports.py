"""One rule for every chapter: an answer may not import or call the course's own implementation.

The course ships a working ``minipar.tensor_parallel``, ``minipar.pipeline_parallel`` and so on;
an exercise asks the learner to write that code, so an answer that calls it proves nothing. The
rule, stated once (:data:`RULE`, in the exercises' introduction and in every starter): an answer
may call torch, the launcher and the answers of the earlier exercises it builds on; it may not
call the course's implementation of what the task asks. Every task of every chapter enforces it
(:meth:`minipar.grading.declare.Chapter.task`) with one reason (:func:`course_reason`). Two
checks share one list of forbidden modules per chapter (:data:`FORBIDDEN`):

* :func:`forbid_course_code` (static, in the grading process, before anything runs): the names
  the candidate's code uses -- globals, attributes of imported modules, closures, base classes,
  and recursively the learner's own helpers it calls -- resolved to objects; one that lives in a
  forbidden module fails with "your code uses the course's own minipar.x.y (Name) ...".
* :func:`course_calls` (dynamic, on a rank, around the candidate's call): a profile hook that
  records each *entry* into a forbidden module (a call whose caller is outside it), which catches
  what the static pass cannot see (``importlib.import_module("minipar....")``, ``getattr``).
  :func:`reject_course_calls` turns what it recorded into the same reason.

An exercise that hands the learner a course helper on purpose (the tensor-parallel MLP uses the
f and g of exercise 1 from ``minipar.tensor_parallel``) names it in ``allow``: a qualified name
such as ``"copy_to_tp_region"`` or ``"_CopyToTPRegion"`` (which covers its methods, since
autograd calls ``_CopyToTPRegion.backward`` directly).
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import functools
import importlib
import inspect
import sys
import types

from minipar.chapters import SLUGS
from minipar.grading import GradeFailure

#: the chapters whose answers are not exactly their own package ``minipar.<slug>``
_ANSWERS: dict[str, tuple[str, ...]] = {
    # the collectives and the α-β cost model (minipar.cost.network.collectives)
    "collectives": ("minipar.collectives", "minipar.cost"),
    # the formulas (minipar.cost: Eq. 2, ZeRO's bytes, Table 2, flops_per_iteration) and the
    # measuring helpers; the GPT, ZeRO and the launcher the measuring tasks use are not answers
    "memory_time": (
        "minipar.cost",
        "minipar.memory_time.model_states",
        "minipar.memory_time.activations",
    ),
    # the all-reduce, the bucketed DDP, accumulation and ZeRO; not the models and batches
    "data_parallel": (
        "minipar.data_parallel.naive",
        "minipar.data_parallel.bucketed",
        "minipar.data_parallel.accumulation",
        "minipar.data_parallel.zero",
        "minipar.data_parallel.overlap",
        "minipar.data_parallel.train",
    ),
    # 3D: the grids (exercises 1 and 4) and the planner, which holds the search (exercise 2)
    # and the cost-per-token formula (exercise 3)
    "three_d": ("minipar.grid", "minipar.three_d", "minipar.cost.planner.three_d"),
}

#: chapter slug (every one of :mod:`minipar.chapters`) -> the modules that hold its answers
FORBIDDEN: dict[str, tuple[str, ...]] = {s: _ANSWERS.get(s, (f"minipar.{s}",)) for s in SLUGS}

#: the rule every starter and the exercises' introduction state, in the learner's words
RULE = (
    "an answer may call torch, the launcher and the answers of the earlier exercises it builds "
    "on, not the course's implementation of what the task asks"
)


def forbidden_modules(chapter: str) -> tuple[str, ...]:
    """The modules an answer of ``chapter`` may not use (``KeyError`` for an unknown slug)."""
    return FORBIDDEN[chapter]


def _under(name: str | None, names: tuple[str, ...]) -> bool:
    """``name`` is one of ``names`` or inside one: a submodule, a class's method."""
    return any(name == n or (name or "").startswith(n + ".") for n in names)


def _module_of(obj) -> str | None:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    return (
        getattr(obj, "__module__", None)
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType))
        else None
    )


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _functions_of(obj):
    """The Python functions that make up ``obj`` (a function, a bound method, a class)."""
    while isinstance(obj, (types.MethodType, staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        return [f for f in (obj.fget, obj.fset, obj.fdel) if f is not None]
    if isinstance(obj, types.FunctionType):
        return [obj]
    if isinstance(obj, type):
        members = (types.FunctionType, staticmethod, classmethod, property)
        return [f for v in vars(obj).values() if isinstance(v, members) for f in _functions_of(v)]
    call = getattr(type(obj), "__call__", None)  # noqa: B004 (the class's __call__ itself: an instance, e.g. an nn.Module)
    if call is not None and not isinstance(obj, type) and hasattr(obj, "__dict__"):
        return _functions_of(type(obj))
    return []


def find_course_use(candidate, modules: tuple[str, ...], allow: tuple[str, ...] = ()) -> str | None:
    """``"minipar.x.y (Name)"`` for the first forbidden object the candidate's code refers to,
    else ``None``. Follows the learner's own helpers (functions and classes defined outside
    ``minipar`` and outside libraries) that the candidate uses."""
    if not isinstance(candidate, types.ModuleType):
        if itself := _forbidden_object(candidate, modules, allow):
            return itself
    seen: set[int] = set()
    todo = [candidate]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        for base in obj.__mro__[1:] if isinstance(obj, type) else ():
            if _under(base.__module__, modules) and not _under(base.__qualname__, allow):
                return f"{base.__module__} ({base.__qualname__})"
        for value in (v for fn in _functions_of(obj) for v in _referenced(fn)):
            if isinstance(value, types.ModuleType):
                continue
            if hit := _forbidden_object(value, modules, allow):
                return hit
            if _learners(value):
                todo.append(value)
    return None


def _referenced(fn) -> list:
    """The objects function ``fn`` refers to: the globals and builtins it names (modules aside),
    its closure's contents and what it reads through a module (:func:`_through_modules`)."""
    cells = [c.cell_contents if _filled(c) else None for c in fn.__closure__ or ()]
    codes = list(_code_objects(fn.__code__))
    names = {n for code in codes for n in code.co_names}
    env = {**vars(builtins), **fn.__globals__}
    values = [env[n] for n in names if n in env and not isinstance(env[n], types.ModuleType)]
    values += [c.cell_contents for c in fn.__closure__ or () if _filled(c)]
    closure = dict(zip(fn.__code__.co_freevars, cells))
    return values + [v for code in codes for v in _through_modules(code, env, closure)]


_SKIP = {"CACHE", "PRECALL", "EXTENDED_ARG", "NOP", "RESUME", "COPY_FREE_VARS"}


def _import(name, fromlist):
    """The module ``import name`` (with a ``fromlist``: ``from name import ...``) binds, for a
    module of the course; None for any other."""
    if not (isinstance(name, str) and name.startswith("minipar")):
        return None
    try:
        return importlib.import_module(name if fromlist else name.split(".")[0])
    except ImportError:
        return None


def _load(op: str, name, env: dict, local: dict, closure: dict):
    """What a load of ``name`` pushes, as far as modules go (None for any other instruction)."""
    if op in ("LOAD_GLOBAL", "LOAD_NAME"):
        return env.get(name)
    if op.startswith("LOAD_FAST"):
        return local.get(name)
    if op == "LOAD_DEREF":
        return closure.get(name, local.get(name))
    return None


def _through_modules(code, env: dict, closure: dict):
    """The objects ``code`` reaches through a module: ``tp.X``, ``minipar.tensor_parallel.X``,
    ``from minipar.tensor_parallel import X`` inside the function, ``import ... as m; m.X``.
    Follows the bytecode, so only attributes actually read from a module count (an attribute
    of the learner's own object that happens to share a course function's name does not)."""
    local: dict = {}  # local names bound to modules by import statements
    cur, fromlist = None, None
    for ins in dis.get_instructions(code):
        op, arg = ins.opname, ins.argval
        module = isinstance(cur, types.ModuleType)
        if op in _SKIP or (module and op in ("SWAP", "POP_TOP")):  # inside `import a.b.c as m`
            continue
        if op in ("LOAD_CONST", "IMPORT_NAME"):
            cur = _import(arg, fromlist) if op == "IMPORT_NAME" else None
            fromlist = arg if op == "LOAD_CONST" else fromlist
            continue
        if module and op.startswith("STORE"):
            local[arg], cur = cur, None
            continue
        if module and op in ("LOAD_ATTR", "LOAD_METHOD", "IMPORT_FROM"):
            parent, cur = cur, getattr(cur, arg, None)
            if cur is None and op == "IMPORT_FROM":  # a submodule not imported yet
                cur = _import(f"{parent.__name__}.{arg}", (arg,))
            if cur is not None and not isinstance(cur, types.ModuleType):
                yield cur
            if op == "IMPORT_FROM" and cur is not None:
                continue
        else:
            cur = _load(op, arg, env, local, closure)
        fromlist = None if op != "IMPORT_FROM" else fromlist


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (reading an empty closure cell raises ValueError)
    except ValueError:
        return False
    return True


def _forbidden_object(value, modules, allow) -> str | None:
    mod = _module_of(value)
    if mod is None and not isinstance(value, (int, float, str, bytes, tuple, list, dict)):
        value = type(value)  # an instance of a course class
        mod = value.__module__
    if not _under(mod, modules):
        return None
    if isinstance(value, types.ModuleType):
        return value.__name__
    qual = getattr(value, "__qualname__", getattr(value, "__name__", "?"))
    return None if _under(qual, allow) else f"{mod} ({qual})"


def _learners(value) -> bool:
    """A function or class the learner wrote (not in a library, not in minipar)."""
    if not isinstance(value, (types.FunctionType, type, types.MethodType)):
        return False
    mod = _module_of(value) or ""
    if mod.split(".")[0] in sys.stdlib_module_names or mod.startswith(("minipar", "torch")):
        return False
    try:
        path = inspect.getfile(value)
    except (TypeError, OSError):
        return True  # defined in a notebook or REPL
    return "site-packages" not in path and "/lib/python" not in path


def course_reason(used: str) -> str:
    """The one reason every task gives an answer that uses the course's ``used``."""
    return f"your code uses the course's own {used}: {RULE}"


def _parts(candidate) -> list:
    """The objects a candidate is made of: itself, or the members of a tuple, list, dict or
    ``functools.partial`` (a pair of functions, a function with its arguments bound)."""
    if isinstance(candidate, functools.partial):
        return [candidate.func, *candidate.args, *candidate.keywords.values()]
    if isinstance(candidate, dict):
        return [p for v in candidate.values() for p in _parts(v)]
    if isinstance(candidate, (tuple, list)):
        return [p for v in candidate for p in _parts(v)]
    return [candidate]


def forbid_course_code(
    candidate,
    chapter: str | None = None,
    *,
    modules: tuple[str, ...] | None = None,
    allow: tuple[str, ...] = (),
) -> None:
    """Raise :class:`GradeFailure` if ``candidate`` (or a member of it: :func:`_parts`) refers
    to a module of ``chapter``'s answers (or to ``modules``), except the helpers named in
    ``allow``; the reason (:func:`course_reason`) names the module and object used."""
    mods = modules if modules is not None else forbidden_modules(chapter)
    for part in _parts(candidate):
        if used := find_course_use(part, mods, allow):
            raise GradeFailure(course_reason(used))


@contextlib.contextmanager
def course_calls(modules: tuple[str, ...], allow: tuple[str, ...] = ()):
    """Within the block, record every entry into ``modules`` (a call from outside them), except
    the qualified names in ``allow``; yields a dict whose keys are the ``"module (qualname)"``
    strings in the order they were first entered."""
    used: dict[str, None] = {}

    def profile(frame, event, arg):
        if event != "call" or frame.f_code.co_name in ("<module>", "__create_fn__"):
            return  # not an import itself, nor the functions a dataclass makes while imported
        mod = frame.f_globals.get("__name__", "")
        if not _under(mod, modules):
            return
        back = frame.f_back
        if back is not None and _under(back.f_globals.get("__name__", ""), modules):
            return  # inside the course's code already
        qual = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        if not _under(qual, allow):
            used.setdefault(f"{mod} ({qual})")

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield used
    finally:
        sys.setprofile(old)


@contextlib.contextmanager
def grader_code():
    """Within :func:`course_calls`: the grader's own calls (a reference computed on a rank with
    the course's code) are not recorded."""
    old = sys.getprofile()
    sys.setprofile(None)
    try:
        yield
    finally:
        sys.setprofile(old)


def reject_course_calls(used) -> None:
    """Raise :class:`GradeFailure` naming the first recorded entry (see :func:`course_calls`)."""
    if used:
        raise GradeFailure(course_reason(next(iter(used))))
