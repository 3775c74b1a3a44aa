"""The pykka internals the thread-less actors rely on (docs/internals.md) are still there.

A pykka release that renames or reshapes one of them fails here, by name, instead of as a
hang or a lost message somewhere in the runtime.
"""

from __future__ import annotations

import inspect

import pykka
import pytest
from pykka import messages

from actors import SessionRegistry
from persistence import open_store
from protocol import Message

pytestmark = pytest.mark.timeout(30)

SEE = "see docs/internals.md, 'pykka internals the runtime relies on'"

# name -> the parameters after self it must take
METHODS = {
    "_create_actor_inbox": [],
    "_start_actor_loop": [],
    "_actor_loop_setup": [],
    "_handle_receive": ["message"],
    "_handle_failure": ["exception_type", "exception_value", "traceback"],
    "_stop": [],
}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_actor_methods_we_override_or_call_keep_their_shape(name):
    method = getattr(pykka.Actor, name, None)
    assert callable(method), f"pykka.Actor.{name} is gone ({SEE})"
    params = [p for p in inspect.signature(method).parameters if p != "self"]
    assert len(params) == len(METHODS[name]), f"pykka.Actor.{name}{inspect.signature(method)} changed ({SEE})"


def test_the_stop_message_and_the_envelope_are_where_we_import_them():
    assert isinstance(getattr(messages, "_ActorStop", None), type), f"pykka.messages._ActorStop is gone ({SEE})"
    from pykka import _envelope

    fields = set(inspect.signature(_envelope.Envelope).parameters)
    assert {"message", "reply_to"} <= fields, f"pykka._envelope.Envelope{fields} changed ({SEE})"


def test_actor_init_sets_the_fields_pooled_actors_set_themselves():
    source = inspect.getsource(pykka.Actor.__init__)
    for field in ("actor_urn", "actor_inbox", "actor_stopped", "_actor_ref"):
        assert f"self.{field}" in source, f"pykka.Actor.__init__ no longer sets {field} ({SEE})"


def test_a_pooled_session_actor_still_handles_messages(tmp_path):
    """Through the internals above: a mailbox round trip (a transcript read) and a stop."""
    with open_store(str(tmp_path / "state.db")) as store, SessionRegistry(store) as registry:
        handle = registry.session("s")
        handle.append(Message("user", "hello"))
        assert [m.content for m in handle.transcript()] == ["hello"]
        assert [m.content for m in registry.review("s").transcript()] == ["hello"]
