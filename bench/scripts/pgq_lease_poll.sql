-- pgq lease mode, the end of a group: every block is leased to someone
-- else, and the claim finds nothing (bench.refill('lp', n) leases them all)
SELECT count(*) FROM pgq.claim('lp');
