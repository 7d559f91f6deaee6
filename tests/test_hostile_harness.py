"""The hostile-input suite's tracer (tests/hostile.py) sees an access through a symlink, not a look at one."""

from __future__ import annotations

import os

from hostile import needs_strace, traced

pytestmark = needs_strace


def test_reads_through_links_and_listings_are_seen_looks_at_links_are_not(tmp_path):
    canary = tmp_path / "outside"
    canary.mkdir()
    (canary / "secret").write_text("s")
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(canary / "secret", work / "link")
    looks = (f"import os; os.symlink({str(canary / 'secret')!r}, 'l3'); "
             "import os; os.lstat('link'); os.readlink('link'); os.symlink('/x', 'l2')")
    done, touched = traced(["-c", looks], canary=canary, cwd=work, module="")
    assert done.returncode == 0 and not touched, (done.stderr, touched)
    for code in ("open('link').read()", f"import os; os.listdir({str(canary)!r})",
                 "import os; os.stat('link')", "open('link', 'a').write('x')"):
        done, touched = traced(["-c", code], canary=canary, cwd=work, module="")
        assert done.returncode == 0 and touched, (code, done.stderr)


def test_many_commands_in_one_traced_process_are_judged_each_on_its_own(tmp_path):
    from conftest import populate
    from hostile import traced_many

    import rlarrow

    outside, inside = tmp_path / "outside", tmp_path / "inside"
    for where in (outside, inside):
        with rlarrow.Store.create(where / "store") as st:
            populate(st, episodes=1, length=2)
    # each command's calls are its own: the one before or after reading a canary does not count
    results = traced_many([["info", str(inside / "store")], ["info", str(outside / "store")],
                           ["info", str(inside / "store")], ["info", str(tmp_path / "nowhere")]],
                          canaries=[inside, inside, outside, outside], cwd=tmp_path)
    (code0, _, touched0), (code1, _, touched1), (code2, _, touched2), (code3, err3, touched3) = results
    assert code0 == code1 == code2 == 0
    assert touched0 and not touched1 and not touched2
    assert code3 != 0 and "Error" in err3 and not touched3  # (no store there: an rlarrow error, said)
