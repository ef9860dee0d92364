"""The SQLite results store: persistence, WAL, owner-only files, file links."""
import os
import stat
import threading

from profd.server.daemon.store import Store


def test_put_get_reopen_and_modes(tmp_path):
    db = str(tmp_path / "state" / "profd.sqlite3")
    s = Store(db)
    assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    created = s.put("k1", "/w/a.json", 1.5, 10, b'{"x":1}', None, ["/src/a.py"])
    s.put("k2", "/w/b.json", 2.5, 20, b'{"x":2}', "profd: bad trace /w/b.json: empty", ["/w/b.json"])
    assert s.get("k1") == b'{"x":1}' and s.has("k2") and not s.has("k3")
    assert s.known_file("/w/a.json", 1.5, 10) == "k1"
    assert s.known_file("/w/a.json", 1.6, 10) is None  # changed on disk: hash again
    s.link("/w/c.json", "k1", 3.0, 10)  # same content under another name
    assert s.file_key("/w/c.json") == "k1" and s.count() == 2
    s.close()
    for f in os.listdir(tmp_path / "state"):
        assert stat.S_IMODE(os.stat(tmp_path / "state" / f).st_mode) == 0o600, f
    s2 = Store(db)
    rows = list(s2.rows())
    assert [r.key for r in rows] == ["k1", "k2"] and rows[0].sources == ["/src/a.py"]
    assert rows[0].created == created and rows[1].error.startswith("profd: bad trace")
    s2.close()


def test_concurrent_writers(tmp_path):
    s = Store(str(tmp_path / "db.sqlite3"))

    def writer(n):
        for i in range(50):
            s.put(f"{n}-{i}", f"/w/{n}-{i}.json", 0.0, 1, b"{}", None, [])

    ts = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert s.count() == 200
    s.close()
