"""Build pydantic models from already-valid values, without validating them again.

The codec's trusted path (:func:`schemas.codec.decode` with ``trusted=True``) uses
this for payloads read from gridledger's own topics: each was written by
:func:`schemas.codec.encode` from a model that had been validated when it was
made, with a writer schema this build stores, and Avro's binary format already
fixes every field's type. Validating such a record again re-checks what was
checked before it was written and costs about as much as reading the bytes.

A builder sets the instance's ``__dict__`` directly, as ``BaseModel.model_construct``
does, but is compiled once per model: it knows which fields hold nested models
(directly, optional, in lists or in maps) and converts only those, where
``model_construct`` walks every field, its aliases and defaults on every call (it
measured slower than ``model_validate``). The validators of the models are checks
that return their input unchanged, or fill what the wire always carries (an
event's ``type``), so on a payload written from a valid model they would change
nothing; ``tests/schemas/test_codec.py`` pins that the trusted and validated
decodes of every event and view are equal.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any

from pydantic import BaseModel

from schemas.errors import SchemaRegistryError

Convert = Callable[[Any], Any]
Builder = Callable[[dict[str, Any]], BaseModel]

_set = object.__setattr__


def _converter(tp: Any, leaf: Callable[[Any], Convert | None]) -> Convert | None:
    """How to turn a decoded value of annotation ``tp`` into the model's value (None: as is):
    optionals, lists and maps are walked, and ``leaf`` says what to do with what is inside."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        branches = [a for a in args if a is not type(None)]
        inner = _converter(branches[0], leaf) if len(branches) == 1 else None
        if inner is None:
            return None
        return lambda v: None if v is None else inner(v)
    if origin is list:
        item = _converter(args[0], leaf)
        return None if item is None else (lambda v: [item(x) for x in v])
    if origin is dict:
        value = _converter(args[1], leaf)
        return None if value is None else (lambda v: {k: value(x) for k, x in v.items()})
    return leaf(tp)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _from_avro(tp: Any) -> Convert | None:
    """A value the Avro decoder gave: only nested models need building."""
    return builder(tp) if _is_model(tp) else None


@cache
def builder(model: type[BaseModel]) -> Builder:
    """A function that makes a ``model`` from a dict of its (valid) field values.

    The dict becomes the instance's ``__dict__``; nested records are built in place.
    """
    hooks = model.__pydantic_post_init__, model.__private_attributes__
    if any(hooks) or model.__pydantic_root_model__:
        raise SchemaRegistryError(
            f"{model.__name__} has private attributes, a post-init hook or is a root model: "
            "the trusted decode cannot build it; decode it with trusted=False"
        )
    nested = tuple(
        (name, convert)
        for name, info in model.model_fields.items()
        if (convert := _converter(info.annotation, _from_avro)) is not None
    )
    new = model.__new__

    def build(values: dict[str, Any]) -> BaseModel:
        for name, convert in nested:
            values[name] = convert(values[name])
        obj = new(model)
        _set(obj, "__dict__", values)
        _set(obj, "__pydantic_fields_set__", set(values))
        _set(obj, "__pydantic_extra__", None)
        _set(obj, "__pydantic_private__", None)
        return obj

    return build


_M = typing.TypeVar("_M", bound=BaseModel)


def construct(model: type[_M], values: dict[str, Any]) -> _M:
    """A ``model`` whose ``__dict__`` is ``values``: every field, each already of its
    type (nested models built). What a fold that checked its values itself freezes
    into (``projections.fold``)."""
    obj = model.__new__(model)
    _set(obj, "__dict__", values)
    _set(obj, "__pydantic_fields_set__", set(values))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


# --------------------------------------------------------------------------- stored JSON


def _from_json(tp: Any) -> Convert | None:
    """A value gridledger stored as JSON (``model_dump_json``): nested models are built,
    datetimes parsed, everything else is already its type."""
    if tp is datetime:
        return lambda v: datetime.fromisoformat(v) if isinstance(v, str) else v
    return json_builder(tp) if _is_model(tp) else None


@cache
def json_builder(model: type[BaseModel]) -> Builder:
    """A function that makes a ``model`` from the JSON data of one gridledger stored itself,
    without the model's validators: a rule added since (the API's bounds on a spec) must
    not make a record written before it unreadable. A field the data lacks (added later)
    takes its default."""
    fields = [
        (name, info, _converter(info.annotation, _from_json))
        for name, info in model.model_fields.items()
    ]
    new = model.__new__

    def build(data: dict[str, Any]) -> BaseModel:
        values = {}
        for name, info, convert in fields:
            if name in data:
                value = data[name]
                values[name] = value if convert is None else convert(value)
            else:
                values[name] = info.get_default(call_default_factory=True)
        obj = new(model)
        _set(obj, "__dict__", values)
        _set(obj, "__pydantic_fields_set__", set(data) & set(values))
        _set(obj, "__pydantic_extra__", None)
        _set(obj, "__pydantic_private__", None)
        return obj

    return build
