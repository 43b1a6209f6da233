"""`worker inspect` as text: the JSON `worker/tools/inspect.py` reads, one line per partition or fact."""

from __future__ import annotations

from typing import Any

__all__ = ["describe_group", "describe_run", "describe_thread"]


def _age(seconds: float | None) -> str:
    return "age unknown" if seconds is None else f"{seconds:,.1f} s old"


def _checkpoint(checkpoint: dict[str, Any] | None) -> list[str]:
    if checkpoint is None:
        return ["no changelog"]
    if checkpoint["error"] is not None:
        return [f"checkpoint unusable: {checkpoint['error']}"]
    line = (f"checkpoint at {checkpoint['offset']} ({_age(checkpoint['age_s'])}, {checkpoint['bytes']:,} bytes): "
            f"{checkpoint['open_runs']} open runs, {checkpoint['remembered_runs']} remembered")  # fmt: skip
    oldest = checkpoint["oldest_open_run"]
    if oldest is not None:
        line += f"; oldest {oldest['run_id']} from offset {oldest['first_offset']} ({_age(oldest['age_s'])})"
    lines = [line]
    lines += [f"    {run['run_id']}  agui-seq {run['agui_seq']}  from offset {run['first_offset']}  thread "
              f"{run['thread_id']}" + (f"  closed by {run['closed_by']}" if run["closed_by"] else "")
              for run in checkpoint["runs"]]  # fmt: skip
    if checkpoint["runs_truncated"]:
        lines.append(f"    ... {checkpoint['open_runs'] - len(checkpoint['runs'])} more (--max-runs)")
    return lines


def describe_group(found: dict[str, Any]) -> str:
    """The group's partitions, one line each, with the open runs of each checkpoint below it."""
    lines = [f"group {found['group']} ({found['group_state']}, {found['members']} members), source "
             f"{found['source_topic']}, changelog {found['changelog_topic'] or 'off'}"]  # fmt: skip
    for row in found["partitions"]:
        committed = "nothing committed" if row["committed"] is None else f"committed {row['committed']}"
        replay = "" if row["replay_from"] is None else f", replay from {row['replay_from']}"
        head, *rest = _checkpoint(row["checkpoint"])
        lines.append(f"p{row['partition']}: {committed}, end {row['end_offset']}, lag {row['lag']}{replay}; {head}")
        lines += rest
    display = found["display"]
    if display is not None:
        offsets = ", ".join(f"p{p['partition']} {p['log_start']}..{p['end_offset']}" for p in display["partitions"])
        lines.append(f"display {display['topic']}: {offsets or 'not created yet'}")
    return "\n".join(lines)


def describe_thread(found: dict[str, Any]) -> str:
    """A thread's runs in start order, one line each, and runs the index ended without a start record."""
    first, end = found["read"]
    lines = [f"thread {found['thread_id']}: {len(found['runs'])} runs, thread index partition "
             f"{found['index_partition']} (offsets {first} to {end})"]  # fmt: skip
    for run in found["runs"]:
        ended = "" if run["lastEventAt"] is None else f", last event at {run['lastEventAt']} ms"
        seq = "" if run["aguiSeq"] is None else f", agui-seq {run['aguiSeq']}"
        lines.append(f"  {run['runId']}: {run['state']}, first event at {run['firstEventAt']} ms{ended}{seq} "
                     f"(start record at offset {run['startOffset']})")  # fmt: skip
    if found["unstarted"]:
        lines.append(f"ended without a start record (written before the index; `worker index` writes it): "
                     f"{', '.join(found['unstarted'])}")  # fmt: skip
    return "\n".join(lines)


def describe_run(found: dict[str, Any]) -> str:
    """Where one run stands: its state in the checkpoint, its last event, its display record."""
    at = found["checkpoint_offset"]
    lines = [f"run {found['run_id']}: {found['state']} (checkpoint at {at if at is not None else 'none'}, committed "
             f"{found['committed']}), source partition {found['source_partition']}, output partition "
             f"{found['output_partition']}"]  # fmt: skip
    if found["open"] is not None:
        opened = found["open"]
        lines.append(f"open from offset {opened['first_offset']}, thread {opened['thread_id']}, agui-seq "
                     f"{opened['agui_seq']} at the checkpoint" + (f", closed by {opened['closed_by']}"
                                                                  if opened["closed_by"] else ""))  # fmt: skip
    if found["ended"] is not None:
        lines.append(f"ended at offset {found['ended']['ended_at']}, last sequence {found['ended']['last_sequence']}")
    last = found["last_event"]
    if last is None:
        lines.append(f"no event on the output topic (searched back to offset {found['searched_from']['output']})")
    else:
        lines.append(f"last event: agui-seq {last['agui_seq']} ({last['type']}) at output offset {last['offset']}, "
                     f"from source offset {last['source_offset']}")  # fmt: skip
    display = found["display"]
    if display is not None:
        lines.append(f"display record: agui-seq {display['agui_seq']} at offset {display['offset']}, "
                     f"{display['items']} items ({display['evicted']} evicted), {display['bytes']:,} bytes")
    return "\n".join(lines)
