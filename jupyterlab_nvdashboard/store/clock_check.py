"""Whether the wall clock at start and the stored history agree, and what follows from it.

Pure arithmetic, no I/O: the writer (``service.py``) reads the store's extremes when it
opens and asks ``judge_clock`` what to trust. The store counts retention back from "now" and
never shows a bucket stamped ahead of the clock, so a wall clock that is wrong at start (an
RTC kept in local time, a VM restored with a wrong clock, before NTP) could delete the
history (clock ahead: everything looks old) or hide it (clock behind: everything looks
stamped in the future). Neither the clock nor the store is right by itself; the rules are:

- **Retention counts from no later than the newest stored bucket plus the time this server
  has run** (on the monotonic clock), whatever the wall clock says. A clock ahead of the
  store (a wrong clock, or only a server that was off a while: the two look alike) then
  deletes nothing a server running without a break would not have deleted; deletion is
  only deferred, by the time the server was off, until the next start.
- **A clock behind the newest bucket is the clock's error when the history runs on without
  a break from before the clock to ahead of it** (a clock 10 minutes behind sees its last
  10 minutes "ahead"): nothing is set aside. Likewise when the whole store lies ahead of the
  clock (a clock a year behind): there is nothing near the clock to agree with.
- **Only buckets cut off from the history within reach of the clock by a gap are set aside
  as "ahead"** (what a server wrote while its clock was a year ahead, once the clock is put
  right). Setting aside hides, never deletes: a set-aside bucket comes back into the history
  when the clock reaches it (``service.py`` checks at every prune).
"""

from __future__ import annotations

from dataclasses import dataclass

# How far ahead of the wall clock a bucket may be stamped and still be within the clock's
# reach: a few minutes of NTP slewing or a small step back.
TRUSTED_AHEAD_S = 300.0
# A clock this close to the newest bucket's end (after it, or before it by up to
# TRUSTED_AHEAD_S) agrees with the store: a restart takes seconds to minutes.
AGREE_S = 300.0
# Stored buckets this close together are one stretch of history: a restart, a lost batch.
CONTIGUOUS_S = 300.0

AGREES, AHEAD, BEHIND, EMPTY = ("agrees", "ahead of the store", "behind the store",
                                "no history")


@dataclass(frozen=True)
class StoreExtremes:
    """What the store holds, as the writer finds it at open (epoch seconds; None: nothing).

    ``reached_end_s``: the end of the newest bucket within the clock's reach (stamped no
    more than TRUSTED_AHEAD_S ahead of it); ``beyond_start_s``: the start of the oldest bucket
    beyond that reach."""

    oldest_s: float | None
    newest_end_s: float | None
    reached_end_s: float | None
    beyond_start_s: float | None


@dataclass(frozen=True)
class ClockJudgment:
    """The writer's reading of the clock at open.

    ``state``: AGREES, AHEAD (the clock is past the newest bucket by more than AGREE_S: off
    a while, or ahead), BEHIND (history runs on ahead of the clock) or EMPTY. ``anchor_s``:
    the wall time retention counts from at open; it then runs on with the monotonic clock
    and never past the wall clock. ``set_aside_from_s``: buckets starting after it are set
    aside as "ahead"; None: none are."""

    state: str
    wall_s: float
    anchor_s: float
    set_aside_from_s: float | None
    offset_s: float | None  # wall clock minus the newest bucket's end (None: empty store)
    oldest_s: float | None
    newest_end_s: float | None

    def as_info(self) -> dict[str, object]:
        """``/info.json``'s ``store.clock``."""
        return {"state": self.state, "wall_at_open_s": self.wall_s,
                # Retention counts back from this plus the time since open (never past
                # the wall clock): a value fixed at open, so /info.json stays still.
                "retention_anchor_s": self.anchor_s,
                "clock_minus_newest_s": (None if self.offset_s is None
                                         else round(self.offset_s, 1)),
                "oldest_bucket_s": self.oldest_s, "newest_bucket_end_s": self.newest_end_s,
                "sets_aside_after_s": self.set_aside_from_s}


def judge_clock(wall_s: float, store: StoreExtremes) -> ClockJudgment:
    """What to trust, with the wall clock reading ``wall_s`` at open over ``store``."""
    if store.newest_end_s is None:
        return ClockJudgment(EMPTY, wall_s, wall_s, None, None, None, None)
    set_aside_from = None
    if store.beyond_start_s is None:  # nothing beyond the clock's reach
        reached = store.reached_end_s if store.reached_end_s is not None else wall_s
        state, anchor = _from_reached(wall_s, reached)
    elif store.reached_end_s is None:
        # All of it ahead: a clock behind the whole store (or a store written only while a
        # clock was ahead): nothing near the clock to agree with; set nothing aside.
        state, anchor = BEHIND, wall_s
    elif store.beyond_start_s - store.reached_end_s <= CONTIGUOUS_S:
        # One stretch from within the clock's reach to beyond it: the clock is behind.
        state, anchor = BEHIND, wall_s
    else:
        # A stretch cut off ahead (written while a clock was ahead): set aside, and the
        # history within reach judged alone.
        set_aside_from = wall_s + TRUSTED_AHEAD_S
        state, anchor = _from_reached(wall_s, store.reached_end_s)
    return ClockJudgment(state, wall_s, anchor, set_aside_from,
                         wall_s - store.newest_end_s, store.oldest_s, store.newest_end_s)


def _from_reached(wall_s: float, reached_end_s: float) -> tuple[str, float]:
    """The state and anchor from the newest bucket within the clock's reach: a clock close
    to it is trusted as it is; one far past it counts from the bucket."""
    if wall_s - reached_end_s > AGREE_S:
        return AHEAD, reached_end_s
    return AGREES, wall_s
