-- The user's plans, read however much they said since (issue 21, follow-up).
--
-- The stable memory block shows the plans still ahead of a user (the next trip, an appointment, a
-- birthday: `domain/plans.py`). They were picked among the user's newest 30 events, so an
-- appointment booked weeks ahead was gone from the block once 30 other dated statements followed
-- it. A statement that tells a plan is now tagged `flag:plan` when it is written
-- (`ObservationDraft`), and the profile reads those rows by this index, which holds only them: a
-- few rows per user, whatever the size of the table.
--
-- Rows written before this migration carry no flag; a rewrite of one (an update, a consolidation)
-- sets it.

SET LOCAL lock_timeout = '1min';

CREATE INDEX IF NOT EXISTS observations_plans ON observations (tenant_id, user_id)
  WHERE tags @> '{flag:plan}'::text[];
