"""Records (frozen or not) for the modules on `marun run`'s path to exec: what
`dataclasses.dataclass` makes of them, without its cost at start-up.

The plan's 16 classes cost 21 ms as dataclasses (about 1 ms each: dataclasses compiles every
method on its own, and its import brings `inspect` with `dis`, `ast` and `tokenize`), a third
of what marun adds before the training script runs (docs/performance.md, "The path to exec,
third round"). Here a class's methods are closures over its fields, made from the same rules,
and nothing is compiled until a class has been made COMPILE_AFTER times (below).

What is kept of dataclasses: the fields are the class's own annotations in order, with their
class-level defaults or `field(default=..., default_factory=..., compare=...)`; `__init__`
(positional or by name; `__post_init__` called last), `__repr__`, `__eq__` on the compared
fields, and for `frozen=True` assignment refused and `__hash__` on the compared fields.
Nothing else (no inheritance of fields, `order`, `slots`, `kw_only`, `InitVar`, `ClassVar`):
a class that needs those stays a `dataclasses.dataclass`. `replace` and `fields` take both.
The type checker sees `dataclasses` itself (TYPE_CHECKING), so it checks these classes as
dataclasses; tests/unit/test_records.py holds each rule against `dataclasses`.
"""

from __future__ import annotations

# A class made this many times is planning many nodes (`marun plan --all-nodes` of 8,192 x 8
# makes 200,000 records): its __init__ is then compiled, as dataclasses compiles it, and runs at
# its speed from the next instance on; the path to exec never gets there.
COMPILE_AFTER = 256

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:
    from dataclasses import dataclass, field, fields, replace
else:
    from operator import attrgetter

    _MISSING = object()  # no default

    class FrozenInstanceError(AttributeError):
        """An assignment to a field of a frozen record (dataclasses' error of the same name)."""

    class Field:
        __slots__ = ("compare", "default", "default_factory", "name", "type")

        def __init__(self, default: object, default_factory: object, compare: bool) -> None:
            self.name = ""
            self.type = ""
            self.default = default
            self.default_factory = default_factory
            self.compare = compare

        def __repr__(self) -> str:
            return f"Field(name={self.name!r}, type={self.type!r})"

    def field(
        *, default: object = _MISSING, default_factory: object = _MISSING, compare: bool = True
    ) -> Field:
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot specify both default and default_factory")
        return Field(default, default_factory, compare)

    def _frozen_setattr(self: object, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def _frozen_delattr(self: object, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _compiled_init(cls: type, own: list[Field], frozen: bool, post_init: bool) -> object:
        """The __init__ dataclasses writes for `own`, compiled (0.1 to 0.4 ms a class)."""
        names: dict[str, object] = {"_MISSING": _MISSING, "_put": object.__setattr__}
        args, body = ["self"], []
        for f in own:
            if f.default_factory is not _MISSING:
                names[f"_factory_{f.name}"] = f.default_factory
                args.append(f"{f.name}=_MISSING")
                value = f"_factory_{f.name}() if {f.name} is _MISSING else {f.name}"
            elif f.default is not _MISSING:
                names[f"_default_{f.name}"] = f.default
                args.append(f"{f.name}=_default_{f.name}")
                value = f.name
            else:
                args.append(f.name)
                value = f.name
            put = f"_put(self, {f.name!r}, {value})" if frozen else f"self.{f.name} = {value}"
            body.append(f"    {put}")
        if post_init:
            body.append("    self.__post_init__()")
        source = f"def __init__({', '.join(args)}):\n" + "\n".join(body or ["    pass"])
        exec(compile(source, f"<record {cls.__qualname__}>", "exec"), names)
        function = names["__init__"]
        function.__qualname__ = f"{cls.__qualname__}.__init__"
        return function

    def _first_init(cls: type, own: list[Field], frozen: bool, post_init: bool) -> object:
        """The __init__ of a class's first COMPILE_AFTER instances: nothing compiled (a compile
        was most of a dataclass's cost, 0.4 ms for Settings' 55 fields); the arguments bound as
        a compiled signature binds them, with the same errors."""
        names = tuple(f.name for f in own)
        plain = {f.name: f.default for f in own if f.default is not _MISSING}
        factories = [(f.name, f.default_factory) for f in own if f.default_factory is not _MISSING]
        known = frozenset(names)
        count = len(names)
        title = cls.__qualname__
        put = object.__setattr__ if frozen else setattr  # past a frozen class's refusal
        made = [0]

        def __init__(self: object, *args: object, **kwargs: object) -> None:
            made[0] += 1
            if made[0] == COMPILE_AFTER and cls.__init__ is __init__:
                cls.__init__ = _compiled_init(cls, own, frozen, post_init)
            # kwargs is this call's own dict: the positional arguments join it by name
            if args:
                if len(args) > count:
                    raise TypeError(
                        f"{title}.__init__() takes {count + 1} positional arguments but "
                        f"{len(args) + 1} were given"
                    )
                for name in names[: len(args)]:
                    if name in kwargs:
                        raise TypeError(f"{title}.__init__() got multiple values for {name!r}")
                kwargs.update(zip(names, args))
            if not known.issuperset(kwargs):
                unknown = sorted(set(kwargs) - known)[0]
                raise TypeError(f"{title}.__init__() got an unexpected keyword {unknown!r}")
            values = {**plain, **kwargs}
            for name, factory in factories:
                if name not in values:
                    values[name] = factory()
            if len(values) != count:
                missing = next(name for name in names if name not in values)
                raise TypeError(f"{title}.__init__() missing required argument: {missing!r}")
            # one field at a time in the fields' order, as dataclasses assigns: instances that
            # add the same keys in the same order share their keys (smaller, faster to read)
            for name in names:
                put(self, name, values[name])
            if post_init:
                self.__post_init__()

        return __init__

    def _methods(cls: type, own: list[Field], frozen: bool, post_init: bool) -> dict[str, object]:
        """The class's methods, as closures over its fields."""
        names = tuple(f.name for f in own)
        compared = tuple(f.name for f in own if f.compare)
        title = cls.__qualname__
        # the compared fields as a tuple, in C (attrgetter of two names or more gives a tuple)
        if len(compared) > 1:
            key = attrgetter(*compared)
        else:
            key = attrgetter(*compared, "__class__") if compared else attrgetter("__class__")

        def __repr__(self: object) -> str:
            shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
            return f"{title}({shown})"

        def __eq__(self: object, other: object) -> bool:
            if other.__class__ is not self.__class__:
                return NotImplemented
            # tuples, as dataclasses compares: an element is equal to itself (a NaN too)
            return self is other or key(self) == key(other)

        def __hash__(self: object) -> int:
            return hash(key(self))

        init = _first_init(cls, own, frozen, post_init)
        return {"__init__": init, "__repr__": __repr__, "__eq__": __eq__, "__hash__": __hash__}

    def _process(cls: type, frozen: bool) -> type:
        if any(hasattr(base, "__record_fields__") for base in cls.__mro__[1:]):
            raise TypeError(f"{cls.__name__}: a record's fields are its own (no base record)")
        own: list[Field] = []
        defaulted = False
        # the class's own annotations (3.9 has no inspect.get_annotations; inspect is the cost)
        own_annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
        for name, kind in own_annotations.items():
            given = cls.__dict__.get(name, _MISSING)
            f = given if isinstance(given, Field) else Field(given, _MISSING, True)
            f.name, f.type = name, kind
            if f.default is _MISSING:
                if name in cls.__dict__:
                    delattr(cls, name)  # a default_factory's field has no class attribute
            else:
                setattr(cls, name, f.default)
            required = f.default is _MISSING and f.default_factory is _MISSING
            if required and defaulted:
                raise TypeError(f"non-default argument {name!r} follows default argument")
            defaulted = defaulted or not required
            own.append(f)
        made = _methods(cls, own, frozen, hasattr(cls, "__post_init__"))
        body = cls.__dict__
        # as dataclasses: a method the class writes itself is kept, and so is its own __hash__
        # (not the None that Python puts beside an __eq__ of the class's body)
        own_hash = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
        for method in ("__init__", "__repr__", "__eq__"):
            if method not in body:
                function = made[method]
                function.__qualname__ = f"{cls.__qualname__}.{method}"
                setattr(cls, method, function)
        if frozen:
            if "__setattr__" in body or "__delattr__" in body:
                raise TypeError(f"{cls.__name__}: a frozen record cannot set __setattr__")
            cls.__setattr__ = _frozen_setattr
            cls.__delattr__ = _frozen_delattr
        if not own_hash:
            # frozen: the compared fields' hash; not frozen: unhashable, as eq without frozen
            cls.__hash__ = made["__hash__"] if frozen else None
        cls.__record_fields__ = {f.name: f for f in own}
        cls.__match_args__ = tuple(f.name for f in own)
        return cls

    def dataclass(cls: type | None = None, /, *, frozen: bool = False) -> object:
        if cls is None:
            return lambda c: _process(c, frozen)
        return _process(cls, frozen)

    def fields(class_or_instance: object) -> tuple[Field, ...]:
        own = getattr(class_or_instance, "__record_fields__", None)
        if own is None:
            import dataclasses

            return dataclasses.fields(class_or_instance)
        return tuple(own.values())

    def replace(obj: object, /, **changes: object) -> object:
        """A copy of `obj` with `changes` (a record or a dataclass), through its __init__."""
        own = getattr(obj, "__record_fields__", None)
        if own is None:
            import dataclasses

            return dataclasses.replace(obj, **changes)
        for name in changes:
            if name not in own:
                raise TypeError(
                    f"{type(obj).__name__}.__init__() got an unexpected keyword {name!r}"
                )
        values = {name: getattr(obj, name) for name in own if name not in changes}
        return type(obj)(**values, **changes)


__all__ = ["dataclass", "field", "fields", "replace"]
