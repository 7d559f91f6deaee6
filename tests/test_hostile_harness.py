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
