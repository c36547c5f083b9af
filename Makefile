# pgq: PGXS build
EXTENSION = pgq
MODULE_big = pgq
OBJS = src/pgq.o src/shmem.o src/xact.o src/group.o src/claim.o src/lease.o src/advisory.o src/block.o src/wait.o src/worker.o src/materialize.o src/queue.o src/privilege.o src/admin.o src/blockscan.o src/due.o src/iteminsert.o src/quota.o src/events.o src/claim_list.o src/ordering.o src/itemwrite.o
DATA = sql/pgq--0.1.sql sql/pgq--0.1--0.2.sql proxy/pgq_proxy.control proxy/pgq_proxy--0.2.sql
PGFILEDESC = "pgq - work distribution for PostgreSQL"

PG_CONFIG ?= pg_config

# PostgreSQL's headers are not -Wextra clean: keep the warnings that apply to
# our code (-Wall -Wextra -Werror is what CI builds with), drop the two that
# the server headers trigger.
override PG_CFLAGS += -Wno-unused-parameter -Wno-missing-field-initializers

# pg_regress: a throwaway instance with pgq preloaded
REGRESS = create_group claim hint security bad_input lease advisory modes_bad_input notify queue privileges admin direct_access reinstall subxact xact_refuse owner roles traps_result traps_query traps_fail_data fixes_caller looks cron_params item_lookup item_many finished retention claim_list ordering advisory_queue advisory_queue_position lease_prepare queue_hint item_indexes claim_list_own queue_promote_dead
REGRESS_OPTS = --temp-instance=tmp_check_regress \
	--temp-config=$(srcdir)/test/pgq.conf --load-extension=pgq

# isolation specs live under test/isolation
ISOLATION = create_race claim_race claim_drop drop_abort advisory_race advisory_complete lease_expiry wait_wakeup queue_keys queue_claims queue_lease queue_drop reinstall_cache index_cache group_cache_snapshot reinstall_advisory retry_hint roles_locks due_own_look fixes_channel_race cron_params_race item_key item_many_lease full_scan_own results_wait key_retention claim_list_wait ordering_race claim_abort_wake wait_hand_lock_below_hint advisory_queue_race advisory_queue_ordering advisory_queue_wait advisory_queue_drop lease_due_abort_wake advisory_item_unseen due_look_abort_wake retry_wait_no_hint advisory_own_wait advisory_retry_own advisory_due_held advisory_own_due_wait advisory_due_window advisory_due_spin lease_due_window lease_extend_abort_wake queue_extend_abort_wake queue_late_extend_lock queue_late_extend_wake lease_late_extend_wake queue_purge_retry_wake lease_purge_retry_lock queue_xact_result_wake queue_expiry_result_wake queue_promote_hidden wait_dead_letter_lock
ISOLATION_OPTS = --temp-instance=tmp_check_iso \
	--temp-config=$(srcdir)/test/pgq.conf --load-extension=pgq \
	--inputdir=$(srcdir)/test/isolation \
	--outputdir=output_iso

# isolation specs that pause pgq inside a claim at its injection points
# (PGQ_INJECTION_POINT in src/pgq.h), with the injection_points test module:
# only servers built with --enable-injection-points (17 and later) run them,
# with make installcheck-injection (test/run-tests.sh does where it can)
ISOLATION_INJECTION = claim_count_ahead claim_stale_wake claim_owed_wake claim_abort_hint advisory_gone_count due_look_forget claim_stats_scan retry_missed_wake \
	claim_exhausted_window advisory_fail_gone claim_resume_wake \
	claim_exhausted_owed queue_promote_wake
ISOLATION_INJECTION_OPTS = --temp-instance=tmp_check_inj \
	--temp-config=$(srcdir)/test/pgq.conf --load-extension=pgq \
	--load-extension=injection_points \
	--inputdir=$(srcdir)/test/isolation \
	--outputdir=output_inj --dbname=$(ISOLATION_TESTDB)

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

EXTRA_CLEAN = tmp_check_regress tmp_check_iso output_iso tmp_check_inj output_inj results regression.diffs regression.out

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# rebuild every object when a header changes: PGXS tracks header
# dependencies only in a PostgreSQL built with --enable-depend
$(OBJS): $(wildcard src/*.h)

# The isolation specs of ISOLATION_INJECTION, in an instance of their own.
.PHONY: installcheck-injection
installcheck-injection:
	$(pg_isolation_regress_installcheck) $(ISOLATION_INJECTION_OPTS) \
		$(ISOLATION_INJECTION)

# Benchmarks against plain-SQL designs, on a throwaway server (as root):
# see bench/README.md.
.PHONY: bench
bench:
	bench/run
