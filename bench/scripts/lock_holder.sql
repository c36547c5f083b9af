-- one advisory-mode worker that claims :per blocks of group ag and keeps
-- them (bench/run "locks"); bench/run keeps the session open, idle, until
-- the case ends
SELECT pgq.register_worker('bench holder') AS w \gset
SELECT count(*) FROM pgq.claim('ag', :per, worker_id => :w);
