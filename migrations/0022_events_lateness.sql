-- Events that become visible late (docs/events.md, "Events listed late").
--
-- 1. The position remembers when the feed was listed for it (`listed_at`) and
--    the largest lateness observed of an event's `created` behind that
--    listing (`lateness_seconds`, decaying with time): the overlap a run
--    re-reads behind its position follows it (60 s + twice the lateness,
--    at most an hour) instead of a fixed 60 s.
-- 2. `reconciliation_events_seen`: the events a feed already handled within
--    the reach of any overlap, so a re-read of the overlap handles nothing
--    twice, and an event in it that is not there was listed late.
-- 3. `swept_at`: when the feed last re-read the whole hour behind its
--    position (once an hour, after its new events), so an event listed later
--    than the overlap before any lateness was observed is still read.
SET LOCAL lock_timeout = '10s';

ALTER TABLE reconciliation_events_position ADD COLUMN IF NOT EXISTS listed_at timestamptz;
ALTER TABLE reconciliation_events_position
    ADD COLUMN IF NOT EXISTS lateness_seconds double precision NOT NULL DEFAULT 0;
ALTER TABLE reconciliation_events_position ADD COLUMN IF NOT EXISTS swept_at timestamptz;

CREATE TABLE IF NOT EXISTS reconciliation_events_seen (
    -- The feed's position row: `<RECONCILER_JOB>-events`, or
    -- `<RECONCILER_JOB>-events:<acct_…>` for a connected account's feed.
    job           text        NOT NULL,
    event_id      text        NOT NULL,
    event_created timestamptz NOT NULL,
    seen_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job, event_id)
);

-- Forgetting events older than any overlap reaches, by feed.
CREATE INDEX IF NOT EXISTS reconciliation_events_seen_created
    ON reconciliation_events_seen (job, event_created);
