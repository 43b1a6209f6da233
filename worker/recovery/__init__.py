"""Recovery: a partition's state brought to its committed offset before it goes live, publishing nothing. The
rebuild (`Rebuilder`) starts the partition's producer once the group coordinator says this member owns it, reads
the committed offset, and takes the parked state, or restores the changelog's checkpoint and replays the source
after it, or replays the source alone. It imports nothing of the live path, which awaits it."""

from worker.recovery.ownership import Ownership
from worker.recovery.rebuild import Parked, Rebuilder, Rebuilt
from worker.recovery.replay import Progress, replay_consumer
from worker.recovery.restore import read_changelog

__all__ = ["Ownership", "Parked", "Progress", "Rebuilder", "Rebuilt", "read_changelog", "replay_consumer"]
