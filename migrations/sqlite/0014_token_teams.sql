-- A token may belong to a team: learning keeps each team's (or, without one, each
-- user's) tool history, proposals and suggestions apart, and the scope a token acts
-- in is its team's.
ALTER TABLE api_tokens ADD COLUMN team TEXT;
