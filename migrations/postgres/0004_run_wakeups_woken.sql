-- A run woken while a worker holds it.
--
-- A claimed row is already due, so `wake_run` cannot move its due time earlier, and a
-- wake-up from another stream (a task or child run ending) leaves the run's own
-- stream version unchanged: a worker giving the run back could not tell it had been
-- woken, and stored its own due time (often "never") over the wake-up. `wake_run`
-- now sets `woken`; a claim clears it; a release of a woken row makes it due at once.
ALTER TABLE run_wakeups ADD COLUMN woken BOOLEAN NOT NULL DEFAULT false;
