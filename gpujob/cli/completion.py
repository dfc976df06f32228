"""``gpujob completion bash|zsh|fish``: shell completion scripts.

Commands and options are written into the script from the parser when it is generated; host
names and job ids come from ``gpujob completion --words hosts|jobs``, which reads the host
profiles and the local job index only (no host contact, no heavy import).
"""

from __future__ import annotations

import argparse
import shlex

# positional arguments by what they name; a command not listed takes files
JOB_COMMANDS = {"status", "tail", "stop", "resume", "move", "guard", "pull", "plot", "rm", "compare", "rerun"}
HOST_COMMANDS = {"doctor", "agent-log", "ssh", "gc", "host set", "host rm", "host trust", "host disconnect",
                 "host rekey", "host on", "host off", "host state"}
JOB_OR_HOST = {"tunnel", "exec"}
NO_POSITIONAL = {"ls", "cost", "host ls", "completion"}
WORDS_AND_FILES = {"sweep": "status resume"}  # a job file, or one of these verbs
VALUE_KINDS = {"--host": "hosts", "--to": "hosts"}  # options whose value is a host
SHELLS = ("bash", "zsh", "fish")


def command_table(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """{"" : top-level commands, "host": its actions, "host set": its options, ...}."""
    table: dict[str, list[str]] = {}

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        key = " ".join(path)
        opts = sorted(o for a in p._actions for o in a.option_strings if o.startswith("--"))
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                table[key] = sorted(a.choices)
                for name, sp in a.choices.items():
                    walk(sp, path + [name])
                return
        table[key] = opts

    walk(parser, [])
    table["completion"] = list(SHELLS) + table.get("completion", [])
    return table


def words(kind: str) -> list[str]:
    """Host names or job ids (and job names) known on this laptop."""
    if kind == "hosts":
        from gpujob.config.hosts import HostStore

        return [h.name for h in HostStore().all()]
    if kind == "jobs":
        from gpujob.config import index

        out: dict[str, None] = {}
        for e in reversed(index.entries()):  # newest first
            for w in (e.get("job_id"), e.get("name")):
                if w:
                    out.setdefault(str(w), None)
        return list(out)
    raise ValueError(kind)


def _kind(cmd: str) -> str:
    if cmd in JOB_COMMANDS:
        return "jobs"
    if cmd in HOST_COMMANDS:
        return "hosts"
    if cmd in JOB_OR_HOST:
        return "jobs hosts"
    if cmd in NO_POSITIONAL:
        return "none"
    if cmd in WORDS_AND_FILES:
        return "verbs"
    return "files"


def bash_script(table: dict[str, list[str]]) -> str:
    groups = [k for k in table if k and " " not in k and table[k] and all(not w.startswith("-") for w in table[k])]
    lines = ["# gpujob completion for bash (gpujob completion bash > ~/.local/share/bash-completion/completions/gpujob)",
             "_gpujob_words() { command gpujob completion --words \"$1\" 2>/dev/null; }",
             "_gpujob() {",
             "    local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"",
             "    local cmd=\"\" i w n=0",
             "    for ((i = 1; i < COMP_CWORD; i++)); do",
             "        w=\"${COMP_WORDS[i]}\"",
             "        [[ $w == -* ]] && continue",
             "        if [[ -z $cmd ]]; then cmd=\"$w\"",
             "        elif [[ $n == 0 && \" " + " ".join(groups) + " \" == *\" $cmd \"* ]]; then cmd=\"$cmd $w\"; n=1",
             "        else n=2; fi",
             "    done",
             "    case \"$prev\" in"]
    lines += [f"        {o}) COMPREPLY=($(compgen -W \"$(_gpujob_words {k})\" -- \"$cur\")); return ;;"
              for o, k in VALUE_KINDS.items()]
    lines += ["    esac",
             "    local opts=\"\" kind=files verbs=\"\"",
             "    case \"$cmd\" in"]
    for key, items in table.items():
        if " " not in key and key in groups:
            lines.append(f"        {shlex.quote(key)}) opts={shlex.quote(' '.join(items))}; kind=none ;;")
        elif key:
            verbs = f"; verbs={shlex.quote(WORDS_AND_FILES[key])}" if key in WORDS_AND_FILES else ""
            lines.append(f"        {shlex.quote(key)}) opts={shlex.quote(' '.join(items))}; kind={shlex.quote(_kind(key))}{verbs} ;;")
    lines += [f"        '') opts={shlex.quote(' '.join(table['']))}; kind=none ;;",
              "    esac",
              "    if [[ $cur == -* || $kind == none ]]; then",
              "        COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\")); return",
              "    fi",
              "    case \"$kind\" in",
              "        files) COMPREPLY=($(compgen -f -- \"$cur\")) ;;",
              "        verbs) COMPREPLY=($(compgen -W \"$verbs\" -- \"$cur\") $(compgen -f -- \"$cur\")) ;;",
              "        *) local k all=\"\"; for k in $kind; do all+=\" $(_gpujob_words \"$k\")\"; done",
              "           COMPREPLY=($(compgen -W \"$all\" -- \"$cur\")) ;;",
              "    esac",
              "}",
              "complete -o default -F _gpujob gpujob"]
    return "\n".join(lines) + "\n"


def zsh_script(table: dict[str, list[str]]) -> str:
    return ("#compdef gpujob\n# gpujob completion for zsh (gpujob completion zsh > \"${fpath[1]}/_gpujob\", "
            "or eval \"$(gpujob completion zsh)\" in ~/.zshrc)\n"
            "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(table))


def fish_script(table: dict[str, list[str]]) -> str:
    top = table[""]
    out = ["# gpujob completion for fish (gpujob completion fish > ~/.config/fish/completions/gpujob.fish)",
           "complete -c gpujob -f",
           f"complete -c gpujob -n __fish_use_subcommand -a {shlex.quote(' '.join(top))}",
           *(f"complete -c gpujob -l {o[2:]} -x -a '(gpujob completion --words {k} 2>/dev/null)'"
             for o, k in VALUE_KINDS.items())]
    for key, items in table.items():
        if not key:
            continue
        parts = key.split()
        cond = f"__fish_seen_subcommand_from {parts[-1]}"
        if len(parts) == 2:
            cond = f"__fish_seen_subcommand_from {parts[0]}; and {cond}"
        if items and all(not w.startswith("-") for w in items):
            out.append(f"complete -c gpujob -n {shlex.quote(cond)} -a {shlex.quote(' '.join(items))}")
            continue
        for o in (o for o in items if o.startswith("--")):
            out.append(f"complete -c gpujob -n {shlex.quote(cond)} -l {o[2:]}")
        kind = _kind(key)
        if kind in ("files", "verbs"):
            out.append(f"complete -c gpujob -n {shlex.quote(cond)} -F")
            if kind == "verbs":
                out.append(f"complete -c gpujob -n {shlex.quote(cond)} -a {shlex.quote(WORDS_AND_FILES[key])}")
        elif kind == "none":
            shells = [w for w in items if not w.startswith("-")]
            if shells:
                out.append(f"complete -c gpujob -n {shlex.quote(cond)} -a {shlex.quote(' '.join(shells))}")
        else:
            src = "; ".join(f"gpujob completion --words {k} 2>/dev/null" for k in kind.split())
            out.append(f"complete -c gpujob -n {shlex.quote(cond)} -a {shlex.quote('(' + src + ')')}")
    return "\n".join(out) + "\n"


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    table = command_table(parser)
    return {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[shell](table)
