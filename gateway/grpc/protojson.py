"""ProtoJSON both ways for the gRPC binding, fast: a dict the door's methods return to
the protobuf message it stands for (:func:`to_message`), and a request message to the
dict they take (:func:`to_dict`).

``json_format`` does both in pure Python, walking every field's descriptor on every
call: on a served ``GetTask`` it was half the door's own CPU (loadtests/bench_grpc.py).
Here each message type's fields are read once into a plan (JSON name, attribute, kind),
messages are built with their constructors (C, in protobuf's upb), and only set fields
are read back (``ListFields``). What the plan does not cover (``Value``, ``ListValue``,
``Any``, a value of an unexpected type) is handed to ``json_format``, which is then the
judge: the result is the same message either way, as the tests check.
"""

from __future__ import annotations

import base64
from datetime import datetime
from functools import cache
from typing import Any

from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from gateway.errors import GatewayError

__all__ = ["to_dict", "to_message"]

_STRING, _BOOL, _BYTES, _ENUM, _MESSAGE = (
    FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_BYTES,
    FieldDescriptor.TYPE_ENUM, FieldDescriptor.TYPE_MESSAGE)
_INTEGERS = frozenset({FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64,
                       FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64,
                       FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
                       FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64,
                       FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_SFIXED64})
_LONG = frozenset({FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64,
                   FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_FIXED64,
                   FieldDescriptor.TYPE_SFIXED64})
_FLOATS = frozenset({FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT})
#: Well-known types the plan leaves to json_format (each has a JSON form of its own).
_BY_JSON_FORMAT = frozenset({"google.protobuf.Value", "google.protobuf.ListValue",
                             "google.protobuf.Any", "google.protobuf.Duration",
                             "google.protobuf.FieldMask", "google.protobuf.Empty"})
_STRUCT = "google.protobuf.Struct"
_INFINITY = float("inf")
_TIMESTAMP = "google.protobuf.Timestamp"


class _Unplanned(GatewayError):
    """A value the plan does not convert: json_format converts the whole message."""


# --- dict to message ------------------------------------------------------------------


def to_message(value: dict[str, Any], cls: type[Message], pool: Any) -> Message:
    """``value`` (ProtoJSON) as a ``cls``; fields ``cls`` does not know are left out."""
    try:
        return _build(cls.DESCRIPTOR, value)
    except (_Unplanned, TypeError, ValueError, KeyError, AttributeError, OverflowError):
        message = cls()
        json_format.ParseDict(value, message, ignore_unknown_fields=True,
                              descriptor_pool=pool)
        return message


def _build(descriptor: Any, value: Any) -> Message:
    if type(value) is not dict:
        raise _Unplanned
    cls, plan = _plan(descriptor)
    arguments: dict[str, Any] = {}
    for key, item in value.items():
        field = plan.get(key)
        if field is None:
            continue
        name, convert, repeated, is_map, takes_null = field
        if item is None:
            if takes_null:     # a Value's null, which json_format writes
                raise _Unplanned
            continue
        if is_map:
            arguments[name] = {str(k): convert(v) for k, v in item.items()}
        elif repeated:
            arguments[name] = [convert(element) for element in item]
        else:
            arguments[name] = convert(item)
    return cls(**arguments)


@cache  # bounded: one entry for each message type of the door's pool
def _plan(descriptor: Any) -> tuple[type[Message], dict[str, Any]]:
    plan: dict[str, Any] = {}
    for field in descriptor.fields:
        is_map = (field.type == _MESSAGE and field.message_type.GetOptions().map_entry)
        target = field.message_type.fields_by_name["value"] if is_map else field
        takes_null = (field.type == _MESSAGE and not _repeated(field)
                      and field.message_type.full_name == "google.protobuf.Value")
        entry = (field.name, _converter(target), _repeated(field) and not is_map, is_map,
                 takes_null)
        plan[field.json_name] = entry
        plan[field.name] = entry
    return message_factory.GetMessageClass(descriptor), plan


def _repeated(field: Any) -> bool:
    return bool(field.is_repeated)


def _converter(field: Any) -> Any:
    kind = field.type
    if kind == _STRING:
        return _string
    if kind == _BOOL:
        return _bool
    if kind in _INTEGERS:
        return int
    if kind in _FLOATS:
        return float
    if kind == _BYTES:
        return base64.b64decode
    if kind == _ENUM:
        numbers = {value.name: value.number for value in field.enum_type.values}
        return lambda item: numbers[item] if isinstance(item, str) else int(item)
    sub = field.message_type
    if sub.full_name == _STRUCT:
        struct_class = message_factory.GetMessageClass(sub)

        def struct(item: Any) -> Message:
            if type(item) is not dict:
                raise _Unplanned
            message = struct_class()
            message.update(item)  # type: ignore[attr-defined]
            return message
        return struct
    if sub.full_name == _TIMESTAMP:
        timestamp_class = message_factory.GetMessageClass(sub)
        return lambda item: _timestamp(timestamp_class, item)
    if sub.full_name in _BY_JSON_FORMAT:
        def unplanned(_item: Any) -> Message:
            raise _Unplanned
        return unplanned
    return lambda item: _build(sub, item)


def _string(item: Any) -> str:
    if not isinstance(item, str):   # a str, or a StrEnum such as the door's TaskState
        raise _Unplanned
    return str(item)


def _bool(item: Any) -> bool:
    if type(item) is not bool:
        raise _Unplanned
    return item


def _timestamp(cls: Any, item: Any) -> Message:
    """A UTC RFC 3339 text (``...Z``, as the door writes them) as a Timestamp, with
    ``datetime.fromisoformat`` (C, where json_format goes through ``strptime``); another
    offset, or nanoseconds past the microsecond, are json_format's to read."""
    if type(item) is not str or not item.endswith("Z"):
        raise _Unplanned
    _, _, fraction = item[:-1].partition(".")
    if len(fraction) > 6:
        raise _Unplanned
    moment = datetime.fromisoformat(item[:-1] + "+00:00")
    timestamp: Message = cls(seconds=int(moment.replace(microsecond=0).timestamp()),
                             nanos=moment.microsecond * 1000)
    return timestamp


# --- message to dict ------------------------------------------------------------------


def to_dict(message: Message, pool: Any) -> dict[str, Any]:
    """A request message as ProtoJSON (camelCase names, enums by name, the fields that
    are set only), as ``json_format.MessageToDict`` gives it."""
    try:
        return _read(message)
    except _Unplanned:
        return json_format.MessageToDict(message, descriptor_pool=pool)


def _read(message: Message) -> dict[str, Any]:
    found: dict[str, Any] = {}
    field: Any
    for field, value in message.ListFields():
        if _repeated(field):
            entry = field.message_type if field.type == _MESSAGE else None
            if entry is not None and entry.GetOptions().map_entry:
                found[field.json_name] = {key: _value(entry.fields_by_name["value"], item)
                                          for key, item in value.items()}
            else:
                found[field.json_name] = [_value(field, item) for item in value]
        else:
            found[field.json_name] = _value(field, value)
    return found


def _value(field: Any, value: Any) -> Any:
    kind = field.type
    if kind == _MESSAGE:
        name = field.message_type.full_name
        if name == _STRUCT or name in _BY_JSON_FORMAT or name == _TIMESTAMP:
            return json_format.MessageToDict(value)
        return _read(value)
    if kind == _ENUM:
        enum = field.enum_type.values_by_number.get(value)
        return enum.name if enum is not None else value
    if kind == _BYTES:
        return base64.b64encode(value).decode("ascii")
    if kind in _LONG:
        return str(value)
    if kind in _FLOATS and (value != value or value in (_INFINITY, -_INFINITY)):
        raise _Unplanned   # NaN and infinities have ProtoJSON names of their own
    return value
