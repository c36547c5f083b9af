-- Source of the materialization case: :rows alerts, in time order (jd grows
-- with alert_id, as alerts arrive), with an index on jd.
CREATE TABLE alerts (
    alert_id bigint PRIMARY KEY,
    jd       double precision NOT NULL,
    ra       double precision NOT NULL,
    decl     double precision NOT NULL
);
INSERT INTO alerts
SELECT g, 2460000.5 + g / 10000.0, random() * 360, degrees(asin(2 * random() - 1))
FROM generate_series(1, :rows) g;
CREATE INDEX alerts_jd_idx ON alerts (jd);
-- the array_agg baseline's blocks: a plain table
CREATE TABLE agg_blocks (block_no bigint PRIMARY KEY, ids bigint[] NOT NULL);
VACUUM ANALYZE alerts;
