"""The launcher's audit of the test runner (imported by pbench_pytest.py as the test user, before any code of
the repository runs; stdlib and the image's pytest only).

What it sees leaves the process as it happens, through the evidence channel: a socket the root runner
created and reads to its end (`Channel`), never a file the test user could rewrite afterwards. Every
message carries, from the kernel, the id of the process that sent it; only the launcher's count.

  S                              the audit started (before any code of the repository)
  V verbosity tbstyle            pytest's output settings (what its final line and sections look like)
  T nodeid when outcome xfail    one report of one test phase, as pytest made it
  C nodeid outcome               a collector that failed or was skipped (a file that did not import)
  F text                         a finding: tampering
  E messages                     the end, with the number of T/C messages sent before it

Findings:
  * the code that ran is the code on disk: the collected tests, the fixtures and the hooks defined in the
    protected files (test modules, conftests, test helpers) are compared with code compiled here from those
    files' bytes (plain, and rewritten as pytest rewrites asserts); a hook whose function is not defined in
    its plugin's source is tampering; no bytecode of a file of the work tree is ever read (an audit hook sees
    every .pyc opened), and no protected file is compiled from text other than its own;
  * identity, trusting nothing the repository's code can set: the runner's reporting functions, classes
    and their members are the very objects (and code objects) captured before any code of the repository
    ran; a replacement is allowed only when it is made of such objects (pytest's own legacypath
    properties); no unwrapping, no exemption by file name;
  * where the runner's modules come from (the image, never the work tree) and the hooks registered.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import socket
import sys
import types

from pbench_refs import DONE, MANIFEST, ref_name

RUNNER_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py")
# Where the verdict is made: modules whose functions and classes must be the same objects at the end.
REPORTING = (
    "_pytest.reports",
    "_pytest.runner",
    "_pytest.junitxml",
    "_pytest.terminal",
    "_pytest.main",
    "_pytest.skipping",
    "_pytest.python",
    "_pytest.outcomes",
    "_pytest.unittest",
    "_pytest.nodes",
    "_pytest.config",
    "_pytest.fixtures",
    "_pytest.assertion.rewrite",
    "_pytest.capture",
    "pluggy._callers",
    "pluggy._hooks",
    "pluggy._manager",
    "pluggy._result",
)


def _escape(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


class Channel:
    """The evidence channel (a SOCK_SEQPACKET socket inherited from the root runner): one message per send,
    sent at once. Without a channel (a run by hand), messages go nowhere."""

    def __init__(self, fd: int | None):
        self.sock = socket.socket(fileno=fd) if fd is not None else None
        self._send = self.sock.send if self.sock is not None else None
        self.ino = os.fstat(fd).st_ino if fd is not None else None
        self.fd = fd
        self.sent = 0

    def send(self, kind: str, *fields) -> None:
        if self._send is None:
            return
        if kind in ("T", "C"):
            self.sent += 1
        data = "\t".join([kind, *(_escape(f) for f in fields)]).encode("utf-8", "replace")
        with contextlib.suppress(OSError):  # the runner sees a channel that ended early
            self._send(data[:60000])

    def intact(self) -> bool:
        return self.fd is None or (os.fstat(self.fd).st_ino == self.ino)


def _members(obj):
    """Functions, classes, and class members (functions, class/static methods, properties) of a module."""
    for attr, value in list(vars(obj).items()):
        if inspect.isfunction(value) or inspect.isclass(value):
            yield attr, value
        if inspect.isclass(value) and value.__module__ == obj.__name__:
            for key, member in list(vars(value).items()):
                if inspect.isfunction(member) or isinstance(member, (classmethod, staticmethod, property)):
                    yield f"{attr}.{key}", member


def _parts(value) -> tuple:
    """The objects one value is made of: a function and its code; a class/static method, its function and
    code; a property's accessors and their code. Identity of all of them is what is compared."""
    if isinstance(value, (classmethod, staticmethod)):
        fn = value.__func__
        return (value, fn, getattr(fn, "__code__", None))
    if isinstance(value, property):
        out = [value]
        for fn in (value.fget, value.fset, value.fdel):
            out += [fn, getattr(fn, "__code__", None)]
        return tuple(out)
    if inspect.isfunction(value):
        return (value, value.__code__)
    return (value,)


class ImageSnapshot:
    """What the runner is made of, captured before any code of the repository runs: every function, class
    and member of the runner's (and the image plugins') modules, held by reference (their ids cannot be
    reused), and the reporting functions by dotted name."""

    def __init__(self, modules):
        self.objects: dict[int, object] = {}
        self.codes: dict[int, object] = {}
        for module in modules:
            for _attr, value in _members(module):
                for part in _parts(value):
                    if part is None:
                        continue
                    self.objects[id(part)] = part
                    code = getattr(part, "__code__", None)
                    if code is not None:
                        self.codes[id(code)] = code
        self.reporting = {}
        for name in REPORTING:
            module = sys.modules.get(name)
            if module is not None:
                self.reporting |= {f"{name}.{attr}": _parts(value) for attr, value in _members(module)}

    def knows(self, obj) -> bool:
        return obj is not None and self.objects.get(id(obj)) is obj

    def made_of_image(self, value) -> bool:
        """A value built only of captured objects (pytest's own legitimate replacements)."""
        if isinstance(value, property):
            return all(
                fn is None or (self.knows(fn) and self.codes.get(id(fn.__code__)) is fn.__code__)
                for fn in (value.fget, value.fset, value.fdel)
            )
        if isinstance(value, (classmethod, staticmethod)):
            return self.made_of_image(value.__func__)
        if inspect.isfunction(value):
            return self.knows(value) and self.codes.get(id(value.__code__)) is value.__code__
        return self.knows(value)


def lookup(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        obj = module
        for part in parts[cut:]:
            obj = vars(obj).get(part) if hasattr(obj, "__dict__") else None
            if obj is None:
                return None
        return obj
    return None


def changed_identities(snapshot: ImageSnapshot) -> list[str]:
    found = []
    for dotted, parts in snapshot.reporting.items():
        now = lookup(dotted)
        if now is parts[0] and _parts(now) == parts:
            continue
        if now is not None and snapshot.made_of_image(now):
            continue
        where = getattr(getattr(now, "__code__", None), "co_filename", None) or type(now).__name__
        found.append(f"{dotted} was replaced while the tests ran (by {where}, not an object of the image)")
    return found


class References:
    """Code the runner had compiled from the graded files' bytes, rewritten as pytest rewrites them with no
    assertion pass hook, by the tool user before the tests (pbench_refs.py): one module at a time, each read when
    first asked for, waiting (at most `wait_s` in all) only for a module the producer's manifest names and only
    while the producer runs. Nothing of it is trusted beyond equality: a function equal to its reference is the
    file's code; any other is compared with what this process compiles."""

    def __init__(self, folder: str | None, pid: str | None, wait_s: float = 60.0):
        self.folder, self.pid, self.wait_s = folder, int(pid) if pid else None, wait_s
        self.codes: dict = {}
        self.manifest: set[str] | None = None if folder else set()
        self.deadline: float | None = None

    def get(self, path: str):
        if path not in self.codes:
            self.codes[path] = self._load(path)
        return self.codes[path]

    def _wait_for(self, name: str) -> bool:
        """Until `name` or the producer's `done` is in the folder, the producer exits or the time is up."""
        import time

        if self.deadline is None:
            self.deadline = time.monotonic() + self.wait_s
        target, done = os.path.join(self.folder, name), os.path.join(self.folder, DONE)
        while not os.path.exists(target) and not os.path.exists(done):
            if not self._running() or time.monotonic() >= self.deadline:
                break
            time.sleep(0.01)
        return os.path.exists(target)

    def _load(self, path: str):
        import json
        import marshal

        if self.manifest is None:
            try:
                self._wait_for(MANIFEST)
                with open(os.path.join(self.folder, MANIFEST), "rb") as fh:
                    names = json.loads(fh.read())
                self.manifest = {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()
            except (OSError, ValueError):
                self.manifest = set()
        if path not in self.manifest or not self._wait_for(ref_name(path)):
            return None
        try:
            with open(os.path.join(self.folder, ref_name(path)), "rb") as fh:
                code = marshal.loads(fh.read())
        except (OSError, ValueError, EOFError, TypeError):
            return None
        return code if isinstance(code, types.CodeType) else None

    def _running(self) -> bool:
        """The producer (another user's process) exists and is no zombie: /proc says so to anyone."""
        try:
            with open(f"/proc/{self.pid}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError, TypeError):
            return False


class SourceCode:
    """Code objects compiled from a file's bytes, with pytest's assert rewriting (as pytest imports test
    modules and conftests) and plain (as anything else is imported), indexed by (qualified name, first line).
    The rewritten form comes from the runner's references when they have the file and the run has no
    assertion pass hook, else it is compiled here; each form once per file, the next only when the one before
    does not match."""

    def __init__(self, rewrite, references: References | None = None):
        self.rewrite = rewrite  # (Path, config) -> code, captured from the image before any repo code
        self.references = references
        self.config = None
        self.by_file: dict[tuple[str, str], dict[tuple[str, int], list]] = {}

    def _reference(self, path: str):
        if self.references is None or self.config is None:
            return None
        try:
            if self.config.getini("enable_assertion_pass_hook"):
                return None  # the references were rewritten without it
        except Exception:
            return None
        return self.references.get(path)

    def _index(self, path: str, form: str) -> dict[tuple[str, int], list]:
        key = (path, form)
        if key not in self.by_file:
            index: dict[tuple[str, int], list] = {}
            if form == "reference":
                code = self._reference(path)
                stack = [code] if code is not None else []
            elif form == "rewritten":
                if self.rewrite is None or self.config is None:
                    self.by_file[key] = index
                    return index
                from pathlib import Path

                stack = [self.rewrite(Path(path), self.config)[1]]
            else:
                with open(path, "rb") as fh:
                    stack = [compile(fh.read(), path, "exec", dont_inherit=True)]
            while stack:
                code = stack.pop()
                index.setdefault((code.co_qualname, code.co_firstlineno), []).append(code)
                stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            self.by_file[key] = index
        return self.by_file[key]

    def codes(self, path: str) -> dict[tuple[str, int], list]:
        """The names and lines of a file's code: the reference's, else the plain form's (they are the same in
        every form)."""
        return self._index(path, "reference") or self._index(path, "plain")

    def matches(self, code, path: str, rewritten_first: bool = True) -> bool:
        where = (code.co_qualname, code.co_firstlineno)
        forms = ("reference", "rewritten", "plain") if rewritten_first else ("plain", "rewritten")
        return any(code == c for form in forms for c in self._index(path, form).get(where, []))


def function_of(obj):
    """The plain function behind a test or fixture object (bound methods, partials, pytest's wrappers)."""
    for attr in ("__func__", "_get_wrapped_function"):
        inner = getattr(obj, attr, None)
        if attr == "_get_wrapped_function" and callable(inner):
            try:
                obj = inner()
            except Exception:
                break
        elif inner is not None:
            obj = inner
    return obj if inspect.isfunction(obj) else None


class Audit:
    """The pytest plugin registered before any plugin of the repository, and the audit hook. What it finds
    goes out through the channel at once; `check` runs again at the end of the session."""

    def __init__(
        self,
        *,
        channel,
        snapshot,
        image_dirs,
        work_tree,
        agent_files,
        protected,
        plugins,
        rewrite,
        references=None,
    ):
        self.channel = channel
        self.snapshot = snapshot
        self.image_dirs = tuple(d.rstrip("/") + "/" for d in image_dirs)
        self.work_tree = work_tree.rstrip("/") + "/"
        self.agent_files = {os.path.join(work_tree, f) for f in agent_files}
        self.protected = {os.path.join(work_tree, f) for f in protected}
        self.runner_modules = {
            name: module
            for name, module in sys.modules.items()
            if name.split(".", 1)[0] in RUNNER_PACKAGES or name in plugins
        }
        self.source = SourceCode(rewrite, references)
        self.matched: dict[int, types.CodeType] = {}  # id -> code found equal to its file's
        self.findings: list[str] = []
        self.config = None
        self.session = None
        self._in_hook = False
        self.pycache_prefix = sys.pycache_prefix

    # ------------------------------------------------------------------ findings
    def finding(self, text: str) -> None:
        if text not in self.findings:
            self.findings.append(text)
            self.channel.send("F", text)

    def from_image(self, path) -> bool:
        return bool(path) and os.path.realpath(path).startswith(self.image_dirs)

    # ------------------------------------------------------------------ the audit hook (sys.addaudithook)
    def on_event(self, event: str, args: tuple) -> None:
        if self._in_hook or event not in ("open", "compile"):
            return
        self._in_hook = True
        try:
            if event == "open" and args and isinstance(args[0], str | bytes):
                path = os.fsdecode(args[0])
                # The event comes before the open: importlib asks for caches that do not exist at every import.
                if path.endswith((".pyc", ".pyo")) and not self.from_image(path) and os.path.isfile(path):
                    self.finding(
                        f"bytecode read from {path} (code of the work tree runs from its source only)"
                    )
            elif event == "compile" and len(args) >= 2 and isinstance(args[1], str | bytes):
                filename = os.fsdecode(args[1])
                if filename in self.protected and isinstance(args[0], str | bytes):
                    with open(filename, "rb") as fh:
                        own = fh.read()
                    text = args[0].encode("utf-8", "surrogateescape") if isinstance(args[0], str) else args[0]
                    if text != own:
                        self.finding(
                            f"code compiled at run time under the name of the protected file {filename}"
                        )
        except Exception:  # an audit hook that raises would abort the operation it audits
            pass
        finally:
            self._in_hook = False

    # ------------------------------------------------------------------ pytest hooks
    def pytest_configure(self, config):
        self.config = config
        self.source.config = config
        # What the host must expect of pytest's output: its final count line and FAILURES sections.
        option = config.option
        self.channel.send("V", str(getattr(option, "verbose", 0)), str(getattr(option, "tbstyle", "auto")))
        # Autoloading was off for this process only: xdist workers start their own (clean) discovery.
        os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)

    def pytest_sessionstart(self, session):
        self.session = session

    def pytest_runtest_logreport(self, report):
        self.channel.send(
            "T", report.nodeid, report.when, report.outcome, "1" if hasattr(report, "wasxfail") else "0"
        )

    def pytest_collectreport(self, report):
        if report.outcome != "passed":
            self.channel.send("C", report.nodeid, report.outcome)

    def pytest_collection_finish(self, session):
        self.check_code(session)

    def pytest_runtest_call(self, item):
        fn = function_of(getattr(item, "obj", None))
        if fn is not None:
            self.verify(fn, f"the test {item.nodeid}", item)

    def pytest_sessionfinish(self, session):
        self.check("at the end of the session")

    # ------------------------------------------------------------------ the code that ran is the code on disk
    def verify(self, fn, what: str, item=None) -> None:
        code = getattr(fn, "__code__", None)
        path = getattr(code, "co_filename", None)
        if not path or path.startswith("<") or not os.path.isfile(path):
            self.finding(f"{what} has no source file ({path or type(fn).__name__})")
            return
        image = path not in self.protected and self.from_image(path)
        checked = path in self.protected or image or path.startswith(self.work_tree)
        # A code object found equal to its file's once is that code for good (code objects do not change; the
        # one kept here keeps its id from being reused): a test is checked after the collection, when it runs
        # and at the end, its function compared once.
        if checked and self.matched.get(id(code)) is not code:
            try:
                same = self.source.matches(code, path, rewritten_first=not image)
            except (OSError, SyntaxError, ValueError):
                same = False
            if not same:
                self.finding(f"{what} runs code that is not the code of {path}")
                return
            self.matched[id(code)] = code
        module = getattr(item, "module", None) if item is not None else None
        module_file = getattr(module, "__file__", None)
        if module_file in self.protected and path == module_file and fn.__globals__ is not vars(module):
            self.finding(f"{what} runs with globals that are not those of its module {module_file}")

    def check_code(self, session) -> None:
        for item in getattr(session, "items", []):
            fn = function_of(getattr(item, "obj", None))
            if fn is not None:
                self.verify(fn, f"the test {item.nodeid}", item)
        manager = getattr(session, "_fixturemanager", None)
        for name, defs in list(getattr(manager, "_arg2fixturedefs", {}).items()):
            for fixdef in defs:
                fn = function_of(getattr(fixdef, "func", None))
                path = getattr(getattr(fn, "__code__", None), "co_filename", "")
                if fn is not None and (path in self.protected or path.startswith(self.work_tree)):
                    self.verify(fn, f"the fixture {name!r}")
        for module in list(sys.modules.values()):
            module_file = getattr(module, "__file__", None)
            if module_file in self.protected:
                self._check_namespace(module, module_file)

    def _check_namespace(self, module, path: str) -> None:
        """Every function of a protected module that its source defines is that code (a helper swapped by
        the repository's code forges what the tests see)."""
        try:
            defined = {qual for (qual, _line) in self.source.codes(path) if "." not in qual}
        except (OSError, SyntaxError, ValueError):
            self.finding(f"the protected file {path} cannot be compiled")
            return
        for attr, value in list(vars(module).items()):
            if attr not in defined:
                continue
            chain, seen = [value], set()
            while chain[-1] is not None and id(chain[-1]) not in seen:
                seen.add(id(chain[-1]))
                nxt = getattr(chain[-1], "__wrapped__", None) or getattr(
                    getattr(chain[-1], "__pytest_wrapped__", None), "obj", None
                )
                chain.append(nxt)
            functions = [function_of(v) for v in chain if v is not None]
            functions = [f for f in functions if f is not None]
            if not functions:
                continue  # not a function any more (a class, a fixture object of a newer pytest)
            for fn in functions:
                self.verify(fn, f"{attr} of {path}")

    # ------------------------------------------------------------------ identity and hooks
    def check(self, when: str) -> None:
        for name, module in self.runner_modules.items():
            if sys.modules.get(name) is not module:
                self.finding(f"the runner module {name} was replaced in sys.modules")
        for name, module in list(sys.modules.items()):
            if name.split(".", 1)[0] in RUNNER_PACKAGES:
                path = getattr(module, "__file__", None)
                if path and not self.from_image(path):
                    self.finding(f"the runner module {name} was loaded from {path}, not from the image")
        for text in changed_identities(self.snapshot):
            self.finding(text)
        if self.config is not None:
            self._hooks()
            self._instances()
        if self.session is not None and when == "at the end of the session":
            self.check_code(self.session)
        if sys.pycache_prefix != self.pycache_prefix:
            self.finding(f"sys.pycache_prefix was changed to {sys.pycache_prefix!r}")
        if not self.channel.intact():
            self.finding("the evidence channel's descriptor was replaced")

    def _instances(self) -> None:
        """The functions the runner's live objects hold as attributes of their own (the plugin manager's hook
        executor, each hook caller's, the reporters'): replaced there, every hook call or report goes through
        the replacement while the classes and modules stay untouched."""
        pm = self.config.pluginmanager
        objects = [("the plugin manager", pm), ("the config", self.config)]
        objects += [(f"the hook caller {name}", caller) for name, caller in vars(pm.hook).items()]
        objects += [(f"the plugin {name!r}", plugin) for name, plugin in pm.list_name_plugin()]
        if self.session is not None:
            objects.append(("the session", self.session))
        for what, obj in objects:
            if isinstance(obj, types.ModuleType) or obj is self:
                continue
            for attr, value in list(getattr(obj, "__dict__", {}).items()):
                fn = getattr(value, "__func__", value)
                if not inspect.isfunction(fn) or self.snapshot.made_of_image(fn):
                    continue
                path = fn.__code__.co_filename
                if path in self.protected and self.source.matches(fn.__code__, path):
                    continue
                self.finding(
                    f"{what} holds {attr} = {fn.__qualname__} from {path}, not a function of the image"
                )

    def _hooks(self) -> None:
        pm = self.config.pluginmanager
        for hook_name in sorted(vars(pm.hook)):
            caller = getattr(pm.hook, hook_name)
            for impl in getattr(caller, "get_hookimpls", lambda: [])():
                if impl.plugin is self:
                    continue
                where = f"hook {hook_name} of plugin {impl.plugin_name!r}"
                fn = function_of(impl.function)
                if fn is None:
                    self.finding(f"{where} has no source file ({type(impl.function).__name__})")
                    continue
                if self.snapshot.knows(fn) and self.snapshot.codes.get(id(fn.__code__)) is fn.__code__:
                    plugin_type = type(impl.plugin)
                    type_file = getattr(sys.modules.get(plugin_type.__module__), "__file__", None)
                    if (
                        isinstance(impl.plugin, types.ModuleType)
                        or self.snapshot.knows(plugin_type)
                        or type_file in self.protected
                    ):
                        continue
                    self.finding(f"{where}: the image's function on an object of {plugin_type.__qualname__}")
                    continue
                path = fn.__code__.co_filename
                if os.path.realpath(path) in self.agent_files:
                    self.finding(f"{where} is defined in {path}, which the agent's patch changed")
                    continue
                owner = impl.plugin if isinstance(impl.plugin, types.ModuleType) else type(impl.plugin)
                owner_file = getattr(sys.modules.get(getattr(owner, "__module__", "")), "__file__", None)
                owner_file = getattr(owner, "__file__", None) or owner_file
                if owner_file and path != owner_file and not self.from_image(path):
                    self.finding(
                        f"{where} is not defined in its plugin's source {owner_file} (but in {path})"
                    )
                    continue
                self.verify(fn, where)
