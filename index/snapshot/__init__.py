"""Published snapshots: a read-only copy of a DB that any static web server or object store
serves as it is (``tunedb publish`` writes one; ``tunedb.open("https://host/path/")`` reads
one lazily).  ``format``: the manifest and its files (what writer and reader agree on);
``remote``: fetching with HTTP ranges, verified blocks and a local cache; ``store``: the
read-only :class:`~tunedb.index.snapshot.store.SnapshotStore`; ``signing``: ed25519 keys and
signatures of the manifest; ``rollback``: the snapshot version read per publisher key and URL
(rollback protection of signed snapshots); ``consistency``: each fetched file checked against
the part list and manifest that name it.  A snapshot's publisher and the network are not
trusted: ``format`` validates every manifest and part list, ``consistency`` what was fetched,
``remote`` bounds every request in time and size and keeps it under the snapshot's URL.  See docs/publishing.md."""
