"""What both replication modes share, pure like them (no sockets, no clock, no threads): a core's output
(`ready.Ready`) and its one driver (`driver.Driver`), a leader's client appends (`appends`), the idempotent
producer table (`producers`), the member roles (`role.Role`), and the `replica.ReplicaCore` protocol the
server drives a RaftNode (raft/) or an HaNode (ha/) through. Nothing here imports raft/ or ha/."""
