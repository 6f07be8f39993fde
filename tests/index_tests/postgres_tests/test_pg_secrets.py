"""No text a store makes holds a database password: ``mask_url`` itself, and a real
``PostgresStore`` (a real server) opened with a password in its URL: ``location``, ``repr()``,
``stats()``, the layered and trusted views over it, and the errors of an unreachable server, a
malformed URL and a connection the server cut."""

from __future__ import annotations

import json

import pytest

import tunedb
from tunedb.index.opener import open_error_line, parse_location
from tunedb.index.support.redact import MASK, mask_url, url_secrets

SECRET = "S3cretPass-api7"


@pytest.mark.parametrize("text, expected", [
    ("cannot open database postgresql://tuser:S3cretPass@127.0.0.1:1/t1: refused",
     "cannot open database postgresql://tuser:***@127.0.0.1:1/t1: refused"),
    ("copied 2000, skipped 0 (already in postgresql://tuser:right@h/db)",
     "copied 2000, skipped 0 (already in postgresql://tuser:***@h/db)"),
    ("a postgres://u:p@ss:w@h1:1,h2:2/db?sslmode=off&password=x&a=b and http://v:w@x/",
     "a postgres://u:***@h1:1,h2:2/db?sslmode=off&password=***&a=b and http://v:***@x/"),
    ("host=h user=u password='a b\\' c' dbname=x", "host=h user=u password=*** dbname=x"),
    ("PGPASSWORD=zz tunedb stats; sslpassword = k", "PGPASSWORD=*** tunedb stats; sslpassword = ***"),
    ('{"location": "postgresql://u:pw@h/d", "n": "password=x", "m": "a@b"}',
     '{"location": "postgresql://u:***@h/d", "n": "password=***", "m": "a@b"}'),
])
def test_mask_url_masks_passwords(text, expected):
    assert mask_url(text) == expected
    assert mask_url(expected) == expected  # idempotent


@pytest.mark.parametrize("text", [
    'password authentication failed for user "tuser"', "http://127.0.0.1:8050/", "postgresql://u@h:5/db",
    "./tunedb-data", "memory:x", "user@example.com wrote a:b@c", "",
])
def test_mask_url_leaves_text_without_a_password_alone(text):
    assert mask_url(text) == text


def test_url_secrets_masks_a_password_quoted_alone():
    url = "postgresql://u:S3c%ZZret@h/db?password=x%41yz"
    assert set(url_secrets(url)) >= {"S3c%ZZret", "x%41yz", "xAyz"}
    assert mask_url('invalid percent-encoded token: "S3c%ZZret"', url_secrets(url)) == \
        f'invalid percent-encoded token: "{MASK}"'
    assert mask_url("abc ab", ["ab"]) == "abc ab"  # too short to mask by occurrence


def test_locations_mask_their_password():
    loc = parse_location(f"postgresql://u:{SECRET}@h/db")
    assert SECRET not in repr(loc) and SECRET not in loc.shown and loc.text.endswith("@h/db")
    with pytest.raises(ValueError) as e:
        parse_location(f"s3://key:{SECRET}@bucket/db").check_openable()
    assert SECRET not in str(e.value) and "remote directory" in str(e.value)
    assert SECRET not in open_error_line(ValueError(f"at postgresql://u:{SECRET}@h/db: no"))


def _with_password(url: str) -> str:
    """``url`` (``postgresql://user@...``) with ``SECRET`` as its user's password (the test
    server trusts its clients: the password travels, unchecked)."""
    head, at, tail = url.partition("@")
    assert at and ":" not in head[len("postgresql://"):]
    return f"{head}:{SECRET}@{tail}"


def test_unreachable_and_malformed_urls_are_one_line_errors_without_the_password():
    with pytest.raises(OSError) as e:  # the documented error of an unreachable server (docs/postgres.md)
        tunedb.open(f"postgresql://nobody:{SECRET}@127.0.0.1:1/none")
    assert type(e.value) is OSError and "\n" not in str(e.value) and SECRET not in str(e.value)
    assert "postgresql://nobody@127.0.0.1:1/none" in str(e.value)
    odd = "S3c%ZZret-odd"
    with pytest.raises(ValueError) as e:  # bad input: nothing sent; psycopg's text quotes the password alone
        tunedb.open(f"postgresql://nobody:{odd}@127.0.0.1:1/none")
    assert "percent-encoded" in str(e.value) and odd not in str(e.value) and "\n" not in str(e.value)


def test_an_open_store_never_shows_its_password(postgres_server, postgres_url):
    import psycopg

    from tunedb.index import Record
    from tunedb.index.views.layered import LayeredStore
    from tunedb.index.views.trust import parse_trust, trusted_view

    url = _with_password(postgres_url)
    store = tunedb.open(url)
    try:
        store.commit(Record({"kind": "cpu", "name": "t"}, {"family": "matmul", "m": 1}, {"a": 1}, [1e-3]))
        assert SECRET not in store.location and store.location.startswith("postgresql://postgres@")
        assert SECRET not in repr(store) and store.location in repr(store)
        assert SECRET not in json.dumps(store.stats().to_dict(), default=str)
        layered = LayeredStore([store, tunedb.open("memory:")], writable=0)
        assert SECRET not in layered.location and SECRET not in json.dumps(layered.stats().to_dict(), default=str)
        view = trusted_view(store, parse_trust("measured"))
        assert SECRET not in repr(view) and SECRET not in view.location
        ro = tunedb.open(url, read_only=True)
        assert SECRET not in repr(ro) and "read_only=True" in repr(ro)
        with pytest.raises(ValueError) as e:
            ro.invalidate({"kind": "cpu", "name": "t"})
        assert SECRET not in str(e.value) and "read-only" in str(e.value)
        ro.close()
        # the server cuts the store's connection: the next call's OSError names the URL without the password
        dbname = postgres_url.partition("?")[0].rsplit("/", 1)[1]
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            cut = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
                                (dbname,)).fetchone()[0]
        assert cut == 1
        with pytest.raises(OSError) as e:
            len(store)
        assert SECRET not in str(e.value) and "postgresql://postgres@" in str(e.value)
        assert len(store) == 1  # (and the next call connects again)
    finally:
        store.close()
