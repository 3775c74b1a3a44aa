"""The session actor and its collaborators (internal: nothing here is public API;
the public names are `actors.__all__`).

`actor.SessionActor` is one object serving one live session. It hands two parts of
its work to collaborators that each receive a typed host (as the compaction
attempt receives its `AttemptHost`): `turn_leases.TurnLeases` (turns across
processes: the store's turn lease, turns held behind another holder's, dead
turns) and `submitted.SubmittedAppends` (appends handed to the store's group
commit from an event loop). `turns.TurnGate` keeps this registry's own turns,
`admission.runs_here` is the rule every path obeys before it runs a step off the
mailbox, and `liveness` tells whether another turn's holder process is alive. The
registry and the handles meet the actor through `slot.Slot` (each field has one
writer), `routing.Router` (what the registry does for handles and actors) and
`request.Request` (the mailbox envelope); `commands` checks what a handle sends.
"""
