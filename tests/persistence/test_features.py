"""`store.features`: what a store class can do beyond the `Store` protocol is declared
by the class, never probed for by name; a forwarding wrapper declares nothing."""

from __future__ import annotations

from persistence import SourceScopedStore, StoreFeatures, open_store
from persistence._store import NO_FEATURES, features_of


class Forwarding:
    """A user's wrapper: every call goes to the store it wraps."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_each_backend_declares_what_it_can_do(store, backend):
    features = features_of(store)
    assert features is store.features and isinstance(features, StoreFeatures)
    assert features.submits and features.checksums_rows
    assert features.checks_pages == (backend == "sqlite")  # SQLite's page-level check
    assert features.announces_turns == (backend != "sqlite")  # PostgreSQL's LISTEN/NOTIFY
    assert features.knows_holders == (backend != "sqlite")  # PostgreSQL's holder locks


def test_a_wrapper_and_a_scoped_view_are_used_through_the_protocol_alone(store):
    assert features_of(Forwarding(store)) is NO_FEATURES  # its own append, never the inner append_nowait
    assert Forwarding(store).features is store.features  # (an attribute read would forward)
    assert features_of(SourceScopedStore(store, "web")) is NO_FEATURES


def test_a_subclass_inherits_its_backends_features(tmp_path):
    with open_store(str(tmp_path / "state.db")) as store:

        class Subclass(type(store)):  # type: ignore[misc]
            pass

        assert features_of(object.__new__(Subclass)) is store.features
