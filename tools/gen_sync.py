"""Generate the blocking API (``jetsdk.sync``) from the async classes.

    python tools/gen_sync.py           # (re)write sdk/python/src/jetsdk/sync/*.py
    python tools/gen_sync.py --check   # exit 1 if the files on disk are stale

Only the async code is written by hand. For each class in :data:`SPECS` this reads the
source with :mod:`ast` and emits a wrapper class with the same name, the same public
methods, signatures, defaults and docstrings (rewritten by the ordered substitution table
:data:`DOC_SUBS`), where

- ``async def m(...)`` becomes ``def m(...)`` that runs the coroutine in the client's loop
  thread (``SyncWrapper._run``) and returns its result;
- a plain ``def m(...)`` runs in the loop thread too (``_run_sync``): the object's state
  belongs to that thread;
- ``@property`` reads are forwarded as they are (one line each, ``Forwarded``, with the
  property's docstring as the attribute's);
- ``__aenter__/__aexit__`` become ``__enter__/__exit__`` plus ``open()/close()``, one
  lifecycle for every class in the base ``SyncWrapper`` (the class's async object comes from
  the ``_factory`` its ``__init__`` sets); ``__aiter__/__anext__`` become
  ``__iter__/__next__``;
- parameters typed with a wrapped class (a sync ``Client`` given to ``Producer``) are
  unwrapped, and results typed with a class in :data:`RETURN_WRAPPERS` are wrapped.

Why wrappers around a private event-loop thread instead of an unasync-style rewrite to
blocking sockets: the async objects run background tasks (connection readers, the
producer's per-partition senders and linger timers, the consumer's prefetching fetchers)
that must keep running between two calls of a synchronous caller. A rewrite would need a
threaded twin of every one of them; wrappers reuse the one tested implementation. See
``jetsdk/_sync_support.py`` for the loop thread.

The output is deterministic and already in ``ruff format`` style; imports are resolved to
the module that defines each name.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "sdk" / "python" / "src"
OUT = SRC / "jetsdk" / "sync"
LINE = 100
HEADER = "# generated — do not edit: made by tools/gen_sync.py from {source}\n"


@dataclass(frozen=True)
class Spec:
    """One async class to wrap."""

    module: str
    cls: str
    out: str
    owns_loop: bool = False
    skip: frozenset[str] = field(default_factory=frozenset)
    queued: bool = False
    """``send_soon``/``send`` check the message on the caller's thread and go through the
    wrapper's send queue (:mod:`jetsdk._sync_sends`); ``flush`` and closing drain it."""
    buffered: bool = False
    """Iteration and ``fetch`` go through the wrapper's buffer, which the loop thread fills
    a batch at a time, one ahead (:mod:`jetsdk._sync_reads`); the methods in
    :data:`GIVES_BACK` and closing first give the unconsumed buffered messages back
    (``_give_back_buffer``)."""


SPECS = (
    Spec(
        "jetsdk.client",
        "Client",
        "client.py",
        owns_loop=True,
        skip=frozenset(
            {
                "leader_connection",
                "leader_connection_now",
                "replica_connection",
                "send_to_leader",
                "request_any",
                "request_leader",
                "produce",
            }
            | {"fetch"}
        ),
    ),
    Spec("jetsdk.producer.producer", "Producer", "producer.py", queued=True),
    Spec("jetsdk.consumer.consumer", "Consumer", "consumer.py", buffered=True),
    Spec(
        "jetsdk.consumer.share_consumer",
        "ShareConsumer",
        "share_consumer.py",
        skip=frozenset({"close"}),
    ),
    Spec("jetsdk.table.table", "Table", "table.py", skip=frozenset({"watch"})),
)

PLAIN_DUNDERS = ("__len__", "__contains__")
"""Special methods forwarded like plain methods (``len(table)``, ``key in table``)."""

GIVES_BACK = frozenset({"commit", "position", "lag", "pause"})
"""Methods of a buffered class that must see the positions of what the application got
(a pause: the delivery then holds the paused partitions' buffered messages back)."""

WRAPPED = {spec.cls: f"jetsdk.sync.{spec.out[:-3]}" for spec in SPECS}
"""Async class name -> module of its sync twin."""

RETURN_WRAPPERS = {"SendHandle": "jetsdk._sync_sends"}
"""Result types replaced by a sync twin of the same name, built as ``Twin(self, value)``."""

CALLBACK_WRAPPERS = {"PartitionsCallback": ("thread_callback", "jetsdk._sync_support")}
"""Constructor parameters whose annotation names one of these types are callbacks: the sync
object passes them on wrapped (``thread_callback(cb)``) so they run in a worker thread and
may call the blocking API."""

DOC_SUBS = (
    ("async with ", "with "),
    ("async for ", "for "),
    ("await ", ""),
    ("__aenter__", "__enter__"),
    ("__aexit__", "__exit__"),
    ("__anext__", "__next__"),
    ("__aiter__", "__iter__"),
    ("asyncio and trio", "a private event-loop thread"),
    ("StopAsyncIteration", "StopIteration"),
)
"""Ordered substitutions applied to docstrings."""

_BUILTINS = set(dir(builtins))


def _doc(text: str | None, indent: str) -> list[str]:
    if not text:
        return []
    for old, new in DOC_SUBS:
        text = text.replace(old, new)
    lines = text.strip("\n").split("\n")
    # ast.get_docstring(clean=True) dedents; re-indent every non-empty line.
    body = [indent + line if line.strip() else "" for line in lines]
    body[0] = indent + '"""' + lines[0]
    if len(lines) == 1:
        return [body[0] + '"""']
    return [*body, indent + '"""']


@dataclass
class _Imports:
    names: dict[str, str] = field(default_factory=dict)  # local name -> module

    def add(self, name: str, module: str) -> None:
        self.names.setdefault(name, module)

    def render(self) -> list[str]:
        by_module: dict[str, list[str]] = {}
        for name, module in self.names.items():
            by_module.setdefault(module, []).append(name)
        std = sorted(m for m in by_module if m.split(".")[0] in sys.stdlib_module_names)
        third = sorted(m for m in by_module if m not in std and not m.startswith("jetsdk"))
        own = sorted(m for m in by_module if m.startswith("jetsdk"))
        out: list[str] = []
        for group in (std, third, own):
            for module in group:
                names = sorted(by_module[module], key=_isort_key)
                plain = [n for n in names if " as " not in n]
                if plain:
                    out.extend(_from_import(module, plain))
                for aliased in (n for n in names if " as " in n):
                    out.extend(_from_import(module, [aliased]))
            if group:
                out.append("")
        return out


def _from_import(module: str, names: list[str]) -> list[str]:
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= LINE:
        return [line]
    return [f"from {module} import (", *(f"    {n}," for n in names), ")"]


def _isort_key(name: str) -> tuple[int, str]:
    # ruff's isort order within one import: CONSTANTS, Classes, functions.
    plain = name.split(" as ")[0]
    if plain.isupper() or (plain.upper() == plain and "_" in plain):
        return (0, plain)
    if plain[:1].isupper():
        return (1, plain)
    return (2, plain)


class _Source:
    """Name resolution for one source module."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.path = SRC / (module.replace(".", "/") + ".py")
        self.text = self.path.read_text()
        self.tree = ast.parse(self.text)
        self.origin: dict[str, str] = {}
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.origin[alias.asname or alias.name] = node.module
            elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                self.origin.setdefault(node.name, module)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.origin.setdefault(target.id, module)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                self.origin.setdefault(node.target.id, module)

    def cls(self, name: str) -> ast.ClassDef:
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        raise SystemExit(f"gen_sync: class {name} not found in {self.module}")


def _names(node: ast.AST | None) -> Iterable[str]:
    if node is None:
        return []
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]


@dataclass
class _Param:
    name: str
    annotation: ast.expr | None
    default: ast.expr | None
    kind: str  # "pos", "kw", "posonly", "var" (*args), "varkw" (**kwargs)


def _params(args: ast.arguments) -> list[_Param]:
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    out = [
        _Param(a.arg, a.annotation, d, "posonly" if a in args.posonlyargs else "pos")
        for a, d in zip(positional, defaults)
    ]
    if args.vararg is not None:
        out.append(_Param(args.vararg.arg, args.vararg.annotation, None, "var"))
    out += [_Param(a.arg, a.annotation, d, "kw") for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg is not None:
        out.append(_Param(args.kwarg.arg, args.kwarg.annotation, None, "varkw"))
    return [p for p in out if p.name != "self"]


class _Emitter:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.source = _Source(spec.module)
        self.imports = _Imports()
        self.lines: list[str] = []

    # -- helpers --------------------------------------------------------------------------

    def _need(self, node: ast.AST | None) -> None:
        for name in _names(node):
            if name in _BUILTINS or name == self.spec.cls or name.startswith('"'):
                continue
            if name in WRAPPED:
                self.imports.add(name, WRAPPED[name])
            elif name in RETURN_WRAPPERS:
                self.imports.add(name, RETURN_WRAPPERS[name])
            elif name in self.source.origin:
                self.imports.add(name, self.source.origin[name])
            else:
                raise SystemExit(f"gen_sync: cannot resolve name {name!r} in {self.spec.module}")

    def _annotation(self, node: ast.expr | None) -> str:
        self._need(node)
        return "" if node is None else self._src(node)

    def _src(self, node: ast.expr) -> str:
        # The source text as written (already in ruff style), else a re-rendering.
        text = ast.get_source_segment(self.source.text, node)
        return text if text is not None and "\n" not in text else ast.unparse(node)

    def _signature(self, name: str, params: list[_Param], returns: str, indent: str) -> None:
        parts = ["self"]
        seen_kw = False
        for i, p in enumerate(params):
            if p.kind == "kw" and not seen_kw:
                parts.append("*")
                seen_kw = True
            seen_kw = seen_kw or p.kind == "var"
            stars = {"var": "*", "varkw": "**"}.get(p.kind, "")
            text = f"{stars}{p.name}"
            ann = self._annotation(p.annotation)
            if ann:
                text += f": {ann}"
            if p.default is not None:
                self._need(p.default)
                default = self._src(p.default)
                text += f" = {default}" if ann else f"={default}"
            parts.append(text)
            if p.kind == "posonly" and (i + 1 == len(params) or params[i + 1].kind != "posonly"):
                parts.append("/")
        one = f"{indent}def {name}({', '.join(parts)}) -> {returns}:"
        if len(one) <= LINE:
            self.lines.append(one)
            return
        self.lines.append(f"{indent}def {name}(")
        self.lines.extend(f"{indent}    {part}," for part in parts)
        self.lines.append(f"{indent}) -> {returns}:")

    def _call(self, prefix: str, head: str, params: list[_Param], suffix: str, indent: str) -> None:
        args = [head] if head else []
        for p in params:
            if p.kind in ("var", "varkw"):
                args.append(f"{'*' if p.kind == 'var' else '**'}{p.name}")
                continue
            value = f"{p.name}._obj" if _wrapped_name(p.annotation) else p.name
            args.append(value if p.kind != "kw" else f"{p.name}={value}")
        one = f"{indent}{prefix}({', '.join(args)}){suffix}"
        if len(one) <= LINE:
            self.lines.append(one)
            return
        inner = f"{indent}    {', '.join(args)}"
        if len(inner) <= LINE:
            self.lines += [f"{indent}{prefix}(", inner, f"{indent}){suffix}"]
            return
        self.lines.append(f"{indent}{prefix}(")
        self.lines.extend(f"{indent}    {a}," for a in args)
        self.lines.append(f"{indent}){suffix}")

    # -- the class ------------------------------------------------------------------------

    def emit(self) -> str:
        spec, node = self.spec, self.source.cls(self.spec.cls)
        async_name = f"_Async{spec.cls}"
        self.imports.add(f"{spec.cls} as {async_name}", spec.module)
        self.imports.add("SyncWrapper", "jetsdk._sync_support")
        body: list[str] = []
        self.lines = body
        doc = ast.get_docstring(node)
        extra = (
            f"\n\nBlocking version of :class:`{spec.module}.{spec.cls}`\n(generated); "
            "every call runs in the client's private event-loop thread. Thread-safe."
        )
        body += _doc((doc or spec.cls) + extra, "    ")
        methods = {
            m.name: m for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        self._emit_init(methods["__init__"], async_name)
        for name, method in methods.items():
            if name in spec.skip or name in ("__init__", "__aenter__", "__aexit__"):
                continue
            if name.startswith("_") and name not in ("__aiter__", "__anext__", *PLAIN_DUNDERS):
                continue
            self._emit_method(method)
        header = [
            HEADER.format(source=f"{spec.module.replace('.', '/')}.py"),
            f'"""Blocking :class:`{spec.cls}` (generated from :mod:`{spec.module}`)."""',
            "",
            "from __future__ import annotations",
            "",
            *self.imports.render(),
            "",
            f"class {spec.cls}(SyncWrapper[{async_name}]):",
        ]
        return "\n".join([*header, *body]).rstrip("\n") + "\n"

    def _emit_init(self, init: ast.FunctionDef | ast.AsyncFunctionDef, async_name: str) -> None:
        params = _params(init.args)
        if self.spec.owns_loop:
            backend = _Param("backend", _BACKEND_ANN, _BACKEND_DEFAULT, "kw")
            params_sig = [*params, backend]
        else:
            params_sig = params
        self.lines.append("")
        self._signature("__init__", params_sig, "None", "    ")
        doc = ast.get_docstring(init) or ""
        if any(_callback_wrapper(p.annotation) for p in params):
            doc += (
                "\n\nCallbacks run in a worker thread (not the loop thread): they may block and"
                "\nmay call this object's methods."
            )
        if self.spec.owns_loop:
            doc += (
                "\n\nbackend: the anyio backend of the private loop thread "
                '(``"asyncio"`` or ``"trio"``).'
            )
        self.lines += _doc(doc, "        ")
        self.lines.append(f"        self._factory = lambda: {async_name}(")
        args = []
        for p in params:
            value = f"{p.name}._obj" if _wrapped_name(p.annotation) else p.name
            wrapper = _callback_wrapper(p.annotation)
            if wrapper is not None:
                self.imports.add(*wrapper)
                value = f"{wrapper[0]}({value})"
            args.append(value if p.kind != "kw" else f"{p.name}={value}")
        self.lines.extend(f"            {a}," for a in args)
        self.lines.append("        )")
        if self.spec.owns_loop:
            self.lines.append("        self._backend = backend")
        else:
            owner = next(p.name for p in params if _wrapped_name(p.annotation))
            self.lines.append(f"        self._owner = {owner}")

    def _emit_method(self, method: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        name = method.name
        doc = ast.get_docstring(method)
        L = self.lines
        L.append("")
        if any(isinstance(d, ast.Name) and d.id == "property" for d in method.decorator_list):
            # One line, read through Forwarded (its type is the async property's); the
            # docstring stays, as the attribute's, for the reference page.
            self.imports.add("Forwarded", "jetsdk._sync_support")
            L.append(f"    {name} = Forwarded(_Async{self.spec.cls}.{name})")
            L += _doc(doc, "    ")
            return
        params = _params(method.args)
        returns = self._annotation(method.returns) or "None"
        if name == "__aiter__":
            L += [f"    def __iter__(self) -> {self.spec.cls}:", "        return self"]
            return
        if name == "__anext__":
            L.append(f"    def __next__(self) -> {returns}:")
            L += _doc(doc, "        ")
            if self.spec.buffered:
                L.append("        return self._read_next()")
            else:
                L.append("        return self._next(self._obj)")
            return
        if self.spec.queued and name in ("send_soon", "send", "flush"):
            self._signature(name, params, returns, "    ")
            L += _doc(doc, "        ")
            if name == "flush":
                L.append("        self._queued().flush()")
                return
            self._call("prepared = self._obj._prepare", "", params, "", "        ")
            tail = ".result()" if name == "send" else ""
            L.append(f"        return self._queued().send_soon(prepared){tail}")
            return
        if self.spec.buffered and name == "fetch":
            self._signature(name, params, returns, "    ")
            L += _doc(doc, "        ")
            self._call("return self._buffered_fetch", "self._obj", params, "", "        ")
            return
        self._signature(name, params, returns, "    ")
        L += _doc(doc, "        ")
        if self.spec.buffered and name in GIVES_BACK:
            L.append("        self._give_back_buffer(self._obj)")
        runner = "self._run" if isinstance(method, ast.AsyncFunctionDef) else "self._run_sync"
        head = f"self._obj.{name}"
        wrapper = RETURN_WRAPPERS.get(returns)
        if wrapper is not None:
            self._call(f"result = {runner}", head, params, "", "        ")
            self.lines.append(f"        return {returns}(self, result)")
        elif returns == "None":
            self._call(runner, head, params, "", "        ")
        else:
            self._call(f"return {runner}", head, params, "", "        ")


_BACKEND_ANN = ast.Name("str")
_BACKEND_DEFAULT = ast.Name('"asyncio"')  # rendered verbatim by ast.unparse


def _callback_wrapper(annotation: ast.expr | None) -> tuple[str, str] | None:
    for name in _names(annotation):
        if name in CALLBACK_WRAPPERS:
            return CALLBACK_WRAPPERS[name]
    return None


def _wrapped_name(annotation: ast.expr | None) -> bool:
    return isinstance(annotation, ast.Name) and annotation.id in WRAPPED


def _init_module() -> str:
    lines = [
        HEADER.format(source="the async classes"),
        '"""The blocking jetsdk API, for scripts, threads and Spark executors.',
        "",
        "Same classes, methods and arguments as the async API, without ``await``::",
        "",
        "    from jetsdk.sync import Client, Producer, Consumer",
        "",
        '    with Client(["127.0.0.1:9292"]) as client:',
        '        client.create_stream("orders", "orders", partitions=3)',
        '        with Producer(client, "orders") as producer:',
        '            ack = producer.send(b"hello", key=b"user-1")',
        '            handle = producer.send_soon(b"pipelined")  # handle.result(timeout)',
        '        with Consumer(client, "orders", start="earliest") as consumer:',
        "            for msg in consumer:",
        "                ...",
        "",
        "Generated by ``tools/gen_sync.py`` from the async classes; each sync client runs the",
        "async code in a private event-loop thread (see :mod:`jetsdk._sync_support`).",
        '"""',
        "",
        "from jetsdk._sync_sends import SendHandle",
        *sorted(f"from {WRAPPED[s.cls]} import {s.cls}" for s in SPECS),
        "",
        "__all__ = [" + ", ".join(f'"{n}"' for n in sorted([*WRAPPED, "SendHandle"])) + "]",
    ]
    return "\n".join(lines) + "\n"


def generate() -> dict[Path, str]:
    """Every generated file: path -> content."""
    files = {OUT / spec.out: _Emitter(spec).emit() for spec in SPECS}
    files[OUT / "__init__.py"] = _init_module()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate jetsdk.sync from the async API.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the files are stale")
    args = parser.parse_args(argv)
    files = generate()
    if args.check:
        stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)} (run python tools/gen_sync.py)")
        return 1 if stale else 0
    OUT.mkdir(exist_ok=True)
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
