-- awl_append's statements are planned once per connection, not on every call.
--
-- The version lookup of a many-stream append filters each stream's events by the
-- range of partitions its type can have (`part >= awl_part_floor(type)`). Given the
-- call's values, a custom plan prunes partitions while planning, so the planner
-- costed it below the generic plan and PL/pgSQL made a custom plan on every call:
-- pg_stat_statements (track = all, track_planning) over the board benchmark gave
-- 1,706 plans for 1,871 executions, 861 ms planning against 279 ms executing. The
-- generic plan prunes the same partitions as it runs (the bounds are immutable
-- functions of the outer row) and took 218 ms with no planning.
ALTER FUNCTION awl_append(TEXT[], TEXT[], INTEGER[], BIGINT[], INTEGER[], INTEGER[],
                          TEXT[], INTEGER[], JSONB[], JSONB[], BOOLEAN)
    SET plan_cache_mode = force_generic_plan;
