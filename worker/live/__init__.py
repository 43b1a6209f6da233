"""The live path of `worker run`: the group member, one task per assigned partition (rebuilt by `worker.recovery`,
then processing), the commit pipeline, publishing and the transaction, the topics' checks."""

from worker.live.membership import GroupMember

__all__ = ["GroupMember"]
