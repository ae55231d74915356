"""rewards.trace: what each tool call named, read, changed, fetched and ran, in any tool style."""

import json

import pytest

from rewards.scoring import RewardSettings
from rewards.trace import matches, parse_patch, shell_segments, trace
from rewards.trace.patch import apply_ops
from rewards.trace.scripts import python_effects, sed_change
from rewards.trace.tools import file_text, loads
from tests.rewards.hand_made import bash, read, replace, session, tool, write

S = RewardSettings()
SRC = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return w + h\n"


def calls(*steps):
    return trace(session(*steps), S).calls


def only_change(*steps):
    (change,) = [c for call in calls(*steps) for c in call.changes]
    return change


# --- patches and diffs ---------------------------------------------------------------------------


def test_unified_and_codex_patches_parse():
    unified = "--- a/tests/t.py\n+++ b/tests/t.py\n@@ -1,2 +1,2 @@\n def test():\n-    assert f() == 1\n+    assert f() == 2\n"
    (c,) = parse_patch(unified)
    assert (c.path, c.removed, c.added, c.hunks) == (
        "tests/t.py",
        ["    assert f() == 1"],
        ["    assert f() == 2"],
        (0,),
    )
    codex = "*** Begin Patch\n*** Delete File: tests/old.py\n*** Add File: tests/new.py\n+def test():\n+    pass\n*** End Patch"
    old, new = parse_patch(codex)
    assert old.deleted and old.path == "tests/old.py"
    assert not new.existed and new.added == ["def test():", "    pass"]


def test_hunks_apply_where_their_context_is():
    ops = (
        ("+", "import math"),
        (" ", "def area(w, h):"),
        (" ", "def perimeter(w, h):"),
        ("-", "    return w + h"),
    )
    ops += (("+", "    return 2 * (w + h)"),)
    assert apply_ops(SRC, ops, starts=(0, 2)) == (
        "import math\ndef area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
    )
    assert apply_ops(SRC, (("-", "    return w - h"), ("+", "x"))) is None


# --- shell ---------------------------------------------------------------------------------------------


def test_shell_segments_understand_heredocs_and_operators():
    segments, bodies = shell_segments("cd repo && cat > a.py <<'EOF'\nx = 1 && y\nEOF\necho done | tee log")
    assert segments == [
        ["cd", "repo"],
        ["cat", ">", "a.py", "__HEREDOC0__"],
        ["echo", "done"],
        ["tee", "log"],
    ]
    assert bodies == {"__HEREDOC0__": "x = 1 && y"}
    segments, _ = shell_segments("if [ -f x ]; then (cd /srv && cat y); fi; z=$(head -1 /etc/os-release)")
    assert ["cat", "y"] in segments and ["head", "-1", "/etc/os-release"] in segments


@pytest.mark.parametrize(
    ("command", "path"),
    [
        ("less tests/test_a.py", "tests/test_a.py"),
        ("sed -n '1,20p' tests/test_a.py", "tests/test_a.py"),
        ("grep -rn 'assert' tests/unit", "tests/unit"),
        ("awk 'NR<5' data.csv", "data.csv"),
        ("sudo -u app timeout 5 head -n 3 notes", "notes"),
        ("cd /srv/judge && cat cases", "/srv/judge/cases"),
        ('D=/eval/hidden; head "$D/t.py"', "/eval/hidden/t.py"),
        ("python -c \"print(open('/opt/grading/key.json').read())\"", "/opt/grading/key.json"),
        ("bash -lc 'cat /grader/expected.txt'", "/grader/expected.txt"),
    ],
)
def test_shell_commands_name_their_files(command, path):
    (call,) = calls(bash(command))
    assert path in call.paths


def test_working_directory_and_variables_carry_over_navigation_only_calls():
    c1, c2, c3 = calls(bash("cd /srv/judge"), bash("export REF=/srv/ref"), bash("cat cases.json $REF/a.txt"))
    assert c3.paths == ("/srv/judge/cases.json", "/srv/ref/a.txt")
    c1, c2 = calls(bash("cd /tmp/x && make build"), bash("cat tests/t.py"))
    assert c2.paths == ("tests/t.py",)  # a command that did more than move does not move the session


def test_tilde_is_the_home_folder_the_session_shows():
    edit = replace("/home/dev/proj/app.py", "a = 1", "a = 2")
    _, c2, c3, _ = calls(bash("cd ~/proj"), bash("cat ~/.config/x.toml setup.cfg"), bash("cat $HOME/y"), edit)
    assert c2.paths == ("/home/dev/.config/x.toml", "/home/dev/proj/setup.cfg")
    assert c3.paths == ("/home/dev/y",)
    _, c2 = calls(bash("cd ~/proj"), bash("cat ~/.config/x.toml"))  # no home shown: left as named
    assert c2.paths == ("~/.config/x.toml",)


@pytest.mark.parametrize(
    ("command", "network"),
    [
        ("curl -s https://example.org/x", True),
        ("git clone https://github.com/a/b /tmp/b", True),
        ("git fetch origin", True),
        ("python -m pip download pkg==1.0", True),
        ("uv pip install pkg", True),
        ("npx some-tool", True),
        ("python -c \"import urllib.request; urllib.request.urlopen('https://x.org')\"", True),
        ("rsync -a host:/srv/data ./data", True),
        ("git log --oneline", False),
        ("echo https://example.org >> README.md", False),
        ("rsync -a src/ build/", False),
    ],
)
def test_network_use_by_behaviour(command, network):
    (call,) = calls(bash(command))
    assert bool(call.network) is network


def test_test_runs_and_the_checkout_they_run_in():
    (call,) = calls(bash("cd /workspace/repo && python -m pytest -q && ./run_tests.sh && make test"))
    assert call.runs == ("pytest", "/workspace/repo/run_tests.sh", "make test")
    assert trace(session(bash("cd /workspace/repo && python -m pytest -q")), S).checkouts == {
        "/workspace/repo"
    }


# --- file changes through the shell -------------------------------------------------------------------


def test_sed_commands_apply_to_known_content():
    insert = only_change(read("src/a.py", SRC), bash("sed -i '/def perimeter/i @cached' src/a.py"))
    assert insert.added == ["@cached"] and insert.before == SRC
    delete = only_change(read("src/a.py", SRC), bash("sed -i '1,2d' src/a.py"))
    assert delete.removed == ["def area(w, h):", "    return w * h"]
    assert sed_change("s/(3)/(4)/g;s/9/16/", "f(3) == 9", False)[0] == "f(4) == 16"
    assert sed_change("s|a;b|c|", None, False)[1] == (("-", "a;b"), ("+", "c"))


@pytest.mark.parametrize(
    "command",
    [
        "perl -pi -e 's/w \\+ h/2 * (w + h)/' src/a.py",
        "python - <<'EOF'\nfrom pathlib import Path\np = Path('src/a.py')\np.write_text(p.read_text().replace('w + h', '2 * (w + h)'))\nEOF",
        "cat > src/a.py <<'EOF'\n" + SRC.replace("w + h", "2 * (w + h)") + "EOF",
        "printf 'def area(w, h):\\n    return w * h\\n\\n\\ndef perimeter(w, h):\\n    return 2 * (w + h)\\n' > src/a.py",
    ],
    ids=["perl", "python-heredoc", "cat-heredoc", "printf"],
)
def test_edits_through_interpreters_and_redirections(command):
    change = only_change(read("src/a.py", SRC), bash(command))
    assert change.removed == ["    return w + h"] and change.added == ["    return 2 * (w + h)"]


def test_python_scripts_write_delete_and_move_files():
    effects = python_effects(
        "import os, shutil\nfrom pathlib import Path\nPath('a.txt').write_text('x')\n"
        "with open('b.py', 'w') as fh:\n    fh.write('y = 1')\nos.remove('c.py')\nshutil.move('d.py', 'e.py')\n"
    )
    assert effects == [
        ("write", "a.txt", "x"),
        ("write", "b.py", "y = 1"),
        ("delete", "c.py", None),
        ("move", "d.py", "e.py"),
    ]


@pytest.mark.parametrize(
    ("command", "deleted"),
    [
        ("rm -f tests/test_a.py", "tests/test_a.py"),
        ("git rm -q tests/test_a.py", "tests/test_a.py"),
        ("find tests -name test_a.py -delete", "tests/test_a.py"),
        ("python -c \"import os; os.remove('tests/test_a.py')\"", "tests/test_a.py"),
    ],
)
def test_deletions(command, deleted):
    change = only_change(bash(command))
    assert change.deleted and change.path == deleted


def test_truncation_touch_and_revert():
    assert only_change(read("t.txt", "a\nb\n"), bash("truncate -s 0 t.txt")).removed == ["a", "b"]
    assert not only_change(bash("touch new.txt")).existed
    reverted = only_change(read("src/a.py", SRC), bash("git checkout -- src/a.py"))
    assert reverted.ops and not reverted.added and not reverted.removed


@pytest.mark.parametrize(
    "command, own",
    [
        ("git checkout -- src/a.py", True),
        ("git checkout HEAD -- src/a.py", True),
        ("git restore src/a.py", True),
        ("git checkout origin/main -- src/a.py", True),
        # another line of work's version: what it holds the session has not seen
        ("git checkout jdoe/fix/order -- src/a.py", False),
        ("git restore --source=release-2.4 src/a.py", False),
        ("git restore -s feature/x -- src/a.py", False),
    ],
)
def test_a_checkout_from_another_revision_is_content_unknown(command, own):
    steps = read("src/a.py", SRC), write("src/a.py", SRC + "x = 1\n"), bash(command)
    change = [c for call in calls(*steps) for c in call.changes][-1]
    assert change.path.endswith("src/a.py")
    assert change.opaque is not own
    assert (change.removed == ["x = 1"]) is own


@pytest.mark.parametrize(
    "status, own",
    [
        ("On branch main\nnothing to commit", True),
        ("## release/0.9...origin/release/0.9\n", False),  # main is another line's work here
        ("* release/0.9\n  main\n", False),
    ],
)
def test_the_default_line_is_own_only_on_its_own_branch(status, own):
    steps = (
        read("src/a.py", SRC),
        bash("git status", status),
        write("src/a.py", SRC + "x = 1\n"),
        bash("git checkout origin/main -- src/a.py"),
    )
    change = [c for call in calls(*steps) for c in call.changes][-1]
    assert change.opaque is not own


# --- tool styles ---------------------------------------------------------------------------------------


def test_str_replace_editor_view_create_replace_insert():
    view = tool(
        "str_replace_editor",
        '{"command": "view", "path": "/r/src/a.py"}',
        "Here's the result of running `cat -n` on /r/src/a.py:\n     1\tdef area(w, h):\n     2\t    return w * h\n",
    )
    replace = tool(
        "str_replace_editor",
        '{"command": "str_replace", "path": "/r/src/a.py", "old_str": "w * h", "new_str": "w * h * 1"}',
    )
    insert = tool(
        "str_replace_editor",
        '{"command": "insert", "path": "/r/src/a.py", "insert_line": 1, "new_str": "    # area"}',
    )
    create = tool(
        "str_replace_editor", '{"command": "create", "path": "/r/src/b.py", "file_text": "x = 1\\n"}'
    )
    t = trace(session(view, replace, insert, create), S)
    assert [c.role for c in t.calls] == ["edit", "edit", "edit", "edit"]
    assert t.originals == {"/r/src/a.py": "def area(w, h):\n    return w * h\n"}
    assert t.files["/r/src/a.py"] == "def area(w, h):\n    # area\n    return w * h * 1"
    assert t.calls[3].changes[0].added == ["x = 1"] and t.created == {"/r/src/b.py"}


def test_read_write_edit_grep_tools():
    read_call = tool(
        "Read", '{"file_path": "/r/src/a.py"}', "     1→def area(w, h):\n     2→    return w * h\n"
    )
    edit = tool("Edit", '{"file_path": "/r/src/a.py", "old_string": "w * h", "new_string": "h * w"}')
    multi = tool(
        "MultiEdit", '{"file_path": "/r/src/a.py", "edits": [{"old_string": "area", "new_string": "size"}]}'
    )
    grep = tool(
        "Grep", '{"pattern": "assert", "path": "/r/tests"}', "/r/tests/test_a.py:3:    assert area(2, 2) == 4"
    )
    t = trace(session(read_call, edit, multi, grep), S)
    assert [c.role for c in t.calls] == ["read", "edit", "edit", "search"]
    assert t.files["/r/src/a.py"] == "def size(w, h):\n    return h * w\n"
    assert t.calls[3].paths == ("/r/tests",)


def test_codex_shell_argv_workdir_and_apply_patch():
    cat = tool("shell", '{"command": ["bash", "-lc", "cat src/a.py"], "workdir": "/w/repo"}', SRC)
    patch = tool(
        "apply_patch",
        '{"input": "*** Begin Patch\\n*** Update File: src/a.py\\n@@\\n def perimeter(w, h):\\n-    return w + h\\n+    return 2 * (w + h)\\n*** End Patch"}',
    )
    t = trace(session(cat, patch), S)
    assert t.calls[0].paths == ("/w/repo/src/a.py",) and t.calls[0].cwd == "/w/repo"
    (change,) = t.calls[1].changes
    assert change.before == SRC and change.added == ["    return 2 * (w + h)"]
    argv_patch = tool(
        "shell",
        '{"command": ["apply_patch", "*** Begin Patch\\n*** Add File: x.py\\n+y = 1\\n*** End Patch"]}',
    )
    assert [c.added for call in calls(argv_patch) for c in call.changes] == [["y = 1"]]


def test_fetch_tools_and_unknown_tools():
    fetch, search, other = calls(
        tool("WebFetch", '{"url": "https://example.org/a", "prompt": "read"}'),
        tool("WebSearch", '{"query": "python csv quoting"}'),
        tool("notes", '{"text": "see /eval/hidden/x.py"}'),
    )
    assert (fetch.role, fetch.network) == ("fetch", ("https://example.org/a",))
    assert (search.role, search.network) == ("fetch", ("python csv quoting",))
    assert (other.role, other.paths) == ("other", ("/eval/hidden/x.py",))


def test_tool_output_becomes_file_content():
    assert (
        file_text("Here's the result of running `cat -n` on a.py:\n     1\tx = 1\n     2\t\ty\n")
        == "x = 1\n\ty\n"
    )
    assert file_text("   12→    return x\n   13→") == "    return x\n"
    assert file_text("[File: /a.py (2 lines total)]\n1:x = 1\n2:y = 2\n") == "x = 1\ny = 2\n"
    assert file_text("plain text\n") == "plain text\n"


def test_writes_diff_against_what_the_session_saw():
    change = only_change(read("src/a.py", SRC), write("src/a.py", SRC.replace("w + h", "2 * (w + h)")))
    assert (change.removed, change.added, change.before, change.existed) == (
        ["    return w + h"],
        ["    return 2 * (w + h)"],
        SRC,
        True,
    )


def test_glob_matching():
    assert matches("/work/repo/tests/unit/test_a.py", ("tests/**",)) == "tests/**"
    assert matches("docs/eval/x.md", ("/eval/**",)) is None
    assert matches("/eval/x.md", ("/eval/**",)) == "/eval/**"
    assert matches("a/b/answer_key.json", ("**/answer_key*",)) == "**/answer_key*"


def test_inert_calls():
    assert trace(session(tool("calculator", '{"expression": "1+1"}', "2")), S).inert()
    assert not trace(session(bash("ls")), S).inert()


def test_free_form_inputs_and_tools_known_only_by_their_arguments():
    raw_patch, browser, notebook, terminal = calls(
        tool("apply_patch", "*** Begin Patch\n*** Add File: x.py\n+y = 1\n*** End Patch", "Done"),
        tool("browser", '{"action": "open", "target": "https://example.org/x"}'),
        tool("python", "{\"code\": \"open('out.txt', 'w').write('hi')\"}"),
        tool("terminal", '{"input": "rm tests/test_a.py"}'),
    )
    assert [c.added for c in raw_patch.changes] == [["y = 1"]]
    assert (browser.role, browser.network) == ("fetch", ("https://example.org/x",))
    assert [(c.path, c.added) for c in notebook.changes] == [("out.txt", ["hi"])]
    assert [(c.path, c.deleted) for c in terminal.changes] == [("tests/test_a.py", True)]


@pytest.mark.parametrize(
    "text",
    [
        '{"command": "pytest -q", "timeout": 30}',
        '{"path": "a.py", "content": "x = \\"\\u00e9\\"\\n", "lines": [1, 2.5, -3e2, null, true]}',
        '["a", {"b": {"c": [1e400, -0.0]}}]',
        '{"a": 1, "a": 2}',
        '  "just a string"  ',
        "NaN",
        '{"n": 123456789012345678901234567890}',
    ],
)
def test_tool_arguments_load_as_the_standard_library_loads_them(text):
    assert loads(text) == json.loads(text) or (text == "NaN" and loads(text) != loads(text))
    assert type(loads(text)) is type(json.loads(text))


@pytest.mark.parametrize(
    "text", ['{"command": "ls"', "{'path': 'a'}", '{"a": 1,}', "", "[1, 2] x", '{"a": "\t"}']
)
def test_malformed_tool_arguments_raise_the_standard_librarys_error(text):
    with pytest.raises(json.JSONDecodeError) as ours:
        loads(text)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    assert (ours.value.msg, ours.value.pos) == (theirs.value.msg, theirs.value.pos)


@pytest.mark.parametrize(
    "path, above",
    [
        ("/repo/src/m.py", ["/repo/src", "/repo"]),
        ("src/m.py", ["src"]),
        ("/repo/src/", ["/repo"]),
        ("//srv//app//x", ["//srv//app", "//srv"]),
        ("m.py", []),
        ("/", []),
    ],
)
def test_the_folders_above_a_path(path, above):
    from rewards.trace.paths import parents

    assert parents(path) == above


def test_a_path_deeper_than_any_real_one_keeps_the_folders_nearest_the_root():
    """Each parent copies the path up to it: all of them of a 260,000-character path would be
    billions of characters. Only the 64 nearest the root are kept."""
    from rewards.trace.paths import parents

    above = parents("/a" * 130_000)
    assert above == ["/a" * k for k in range(64, 0, -1)]
    assert parents("/a" * 65) == ["/a" * k for k in range(64, 0, -1)]
    assert parents("/a" * 64) == ["/a" * k for k in range(63, 0, -1)]


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("/repo/src/x.py", "src/x.py", True),
        ("./src/x.py", "src/x.py", True),
        ("../upstream/src/x.py", "src/x.py", False),  # another checkout beside the workspace
        ("/work/../upstream/src/x.py", "src/x.py", False),
        ("../upstream/src/x.py", "../upstream/src/x.py", True),
    ],
)
def test_a_path_out_of_the_working_folder_is_not_the_projects_file(a, b, same):
    from rewards.trace.paths import same_file

    assert same_file(a, b) is same
    assert same_file(b, a) is same


def test_a_sibling_checkouts_file_does_not_become_the_projects_own():
    t = trace(
        session(
            read("src/split.py", "def split(text):\n    return text\n"),
            read(
                "../split-upstream/src/split.py",
                "import re\n\n\ndef split(text):\n    return re.split('---', text)\n",
            ),
            write("src/split.py", "import re\n"),
        ),
        RewardSettings(),
    )
    (change,) = [c for _, c in t.changes()]
    assert change.before == "def split(text):\n    return text\n"
