-- name: FeatureSwitches :many
-- The switches ops have set; a switch without a row is at its default.
SELECT name, enabled, updated_at, updated_by
FROM feature_switches
ORDER BY name;

-- name: SetFeatureSwitch :execrows
-- Sets one switch. A switch already in that position is left alone (row count 0), so its
-- updated_at and updated_by keep saying who last changed it, and when.
INSERT INTO feature_switches (name, enabled, updated_by)
VALUES (@name, @enabled, @updated_by)
ON CONFLICT (name) DO UPDATE
   SET enabled = EXCLUDED.enabled, updated_at = now(), updated_by = EXCLUDED.updated_by
 WHERE feature_switches.enabled IS DISTINCT FROM EXCLUDED.enabled;
