"""What an agent did in a session, call by call: the files it named, read, changed and ran, and
its network use. The hack detectors look at a session only through :func:`trace`.

A tool call's role comes from the tool lists in the settings (``shell_tools``, ``read_tools``,
``edit_tools``, ``search_tools``, ``fetch_tools``) or, for a tool they do not name, from the
shape of its arguments (:mod:`rewards.trace.tools`):

- shell: ``command``/``cmd`` (a string, or an argv list such as ``["bash", "-lc", "..."]``),
  with ``workdir``/``cwd``. The command line is split into simple commands (operators,
  subshells, heredocs, here-strings, wrappers such as ``sudo``/``env``/``timeout``/``uv run``/
  ``xargs``; :mod:`rewards.trace.shell`), variables and the working directory are followed,
  and each command is read by what it does (:mod:`rewards.trace.commands`): its file operands
  (any pager, viewer, stream editor, archiver, copier...), whole-file reads (``cat``, ``less``,
  ``nl``...), changes (``rm``, ``mv``, ``cp``, ``sed -i``, ``perl -pi``, redirections, ``tee``,
  ``truncate``, ``touch``, ``git rm/mv/apply/checkout``, ``patch``, ``apply_patch``, ``find
  -delete``), nested shells and the scripts they run, interpreters' code (``python -c``,
  ``python - <<EOF``, a script file written earlier: its file effects and network use;
  :mod:`rewards.trace.scripts`), network use (download tools, VCS remotes, package managers,
  URLs), test runs.
- read: a path (``path``, ``file_path``, ``absolute_path``, ``target_file``...); the output is
  the file (headers and line-number prefixes are stripped) unless a range is asked.
- edit: ``content``/``file_text`` (whole file), ``old_str``/``new_str`` (and the other
  spellings), ``edits`` lists, ``insert_line`` + ``new_str``, unified diffs or ``*** Begin
  Patch`` blocks (``patch``/``diff``/``input``), deletes; a str_replace editor's ``command``
  verb (``view``, ``create``, ``str_replace``, ``insert``, ``delete``) is honoured.
- search: a ``pattern``/``query`` over a path (grep, glob, list tools).
- fetch: a ``url`` (or a web ``query``, or any argument that is a URL).
- python: a ``code`` argument of a code-execution tool, read like ``python -c``.

A free-form input (not JSON) is a patch when it reads as one, else the command line of a shell
tool or the URL of a fetch tool; a terminal-like tool with one string argument runs it as a
command line; any other tool's string arguments still name paths and URLs.

Contents seen (read, or written by the agent) are remembered, so each change is a line diff
against what was there, with the whole file before and after where the session shows it.
"""

from rewards.trace.patch import line_diff, parse_patch
from rewards.trace.paths import matches, norm_path, paths_in_text, resolve
from rewards.trace.records import Call, FileChange, Trace
from rewards.trace.shell import shell_segments
from rewards.trace.walker import trace

__all__ = [
    "Call",
    "FileChange",
    "Trace",
    "line_diff",
    "matches",
    "norm_path",
    "parse_patch",
    "paths_in_text",
    "resolve",
    "shell_segments",
    "trace",
]
