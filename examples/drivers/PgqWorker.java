/*
 * A pgq worker in Java with pgjdbc (Debian: libpostgresql-jdbc-java).
 *
 *   java -cp /usr/share/java/postgresql.jar PgqWorker.java group NAME
 *   java -cp /usr/share/java/postgresql.jar PgqWorker.java queue NAME
 *   java -cp /usr/share/java/postgresql.jar PgqWorker.java traps
 *
 * group: drains the query group NAME, in its claim mode (transaction or
 *        lease), storing each block's ids in processed(id, block_id) in the
 *        transaction that consumes the block.
 * queue: drains the lease-mode queue NAME, whose payloads are {"n": N}:
 *        stores (N, item id) in processed and completes the item with the
 *        result {"square": N*N}, in one transaction.
 * traps: shows what bites with pgjdbc, on scratch groups it creates.
 *
 * Connects to PGHOST (default localhost; pgjdbc speaks TCP only), PGPORT,
 * PGDATABASE, PGUSER, PGPASSWORD.  Exits 0 once the group is drained or
 * the queue is empty.  See docs/drivers.md.
 */
import java.sql.*;
import java.util.Properties;

public class PgqWorker {
    static String env(String name, String dflt) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? dflt : v;
    }

    static Connection connect(boolean stringtypeUnspecified) throws SQLException {
        String user = env("PGUSER", System.getProperty("user.name"));
        String url = "jdbc:postgresql://" + env("PGHOST", "localhost") + ":" + env("PGPORT", "5432")
            + "/" + env("PGDATABASE", user);
        Properties p = new Properties();
        p.setProperty("user", user);
        if (System.getenv("PGPASSWORD") != null)
            p.setProperty("password", System.getenv("PGPASSWORD"));
        p.setProperty("ApplicationName", "PgqWorker");
        if (stringtypeUnspecified)
            p.setProperty("stringtype", "unspecified");
        return DriverManager.getConnection(url, p);
    }

    /*
     * setString sends a varchar, and no implicit cast turns varchar into
     * interval: "wait => ?" alone fails with 42883 (function does not exist).
     * Cast the parameter in the SQL.
     */
    static final String CLAIM =
        "SELECT block_id, attempt, ids, payload::text FROM pgq.claim(?, wait => ?::interval)";

    static String mode(Connection c, String view, String col, String name) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT mode FROM pgq." + view + " WHERE " + col + " = ?")) {
            ps.setString(1, name);
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next())
                    throw new SQLException(name + " does not exist");
                return rs.getString(1);
            }
        }
    }

    static boolean drained(Connection c, String group) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT state = 'drained' FROM pgq.group_stats WHERE group_name = ?")) {
            ps.setString(1, group);
            try (ResultSet rs = ps.executeQuery()) {
                return rs.next() && rs.getBoolean(1);
            }
        }
    }

    static void store(Connection c, Array ids, long block) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(
                "INSERT INTO processed (id, block_id) SELECT unnest(?::bigint[]), ?")) {
            ps.setArray(1, ids);
            ps.setLong(2, block);
            ps.executeUpdate();
        }
    }

    static void group(String group) throws SQLException {
        try (Connection c = connect(false)) {
            String mode = mode(c, "group_stats", "group_name", group);
            if (!mode.equals("transaction") && !mode.equals("lease"))
                throw new SQLException("this worker handles transaction and lease mode, not " + mode);
            int blocks = 0;
            for (;;) {
                // transaction mode: BEGIN; claim; store; COMMIT.  Lease mode:
                // the claim commits on its own (autocommit), then one
                // transaction stores and completes.
                c.setAutoCommit(!mode.equals("transaction"));
                long block = 0;
                int attempt = 0;
                Array ids = null;
                try (PreparedStatement ps = c.prepareStatement(CLAIM)) {
                    ps.setString(1, group);
                    ps.setString(2, "1 second");
                    // no setFetchSize: a claim runs whole at the first fetch
                    try (ResultSet rs = ps.executeQuery()) {
                        if (rs.next()) {
                            block = rs.getLong(1);
                            attempt = rs.getInt(2);
                            ids = rs.getArray(3);
                        }
                    }
                }
                if (ids == null) {
                    if (!c.getAutoCommit())
                        c.commit();
                    if (drained(c, group))
                        break;
                    continue;
                }
                if (mode.equals("transaction")) {
                    store(c, ids, block);
                    c.commit();
                } else {
                    c.setAutoCommit(false);
                    store(c, ids, block);
                    boolean held;
                    try (PreparedStatement ps = c.prepareStatement(
                            "SELECT pgq.complete(?, attempt => ?)")) {
                        ps.setLong(1, block);
                        ps.setInt(2, attempt);
                        try (ResultSet rs = ps.executeQuery()) {
                            rs.next();
                            held = rs.getBoolean(1);
                        }
                    }
                    if (held)
                        c.commit();
                    else
                        c.rollback();       // the lease ran out: not ours any more
                }
                blocks++;
                System.out.println("block " + block + ": stored (attempt " + attempt + ")");
            }
            System.out.println("group " + group + " is drained; this worker stored " + blocks + " blocks");
        }
    }

    static void queue(String queue) throws SQLException {
        try (Connection c = connect(false)) {
            if (!mode(c, "queue_stats", "queue_name", queue).equals("lease"))
                throw new SQLException("this worker handles lease-mode queues");
            int items = 0;
            for (;;) {
                c.setAutoCommit(true);
                long id = 0;
                int attempt = 0;
                String payload = null;
                try (PreparedStatement ps = c.prepareStatement(CLAIM)) {
                    ps.setString(1, queue);
                    ps.setString(2, "1 second");
                    try (ResultSet rs = ps.executeQuery()) {
                        if (rs.next()) {
                            id = rs.getLong(1);
                            attempt = rs.getInt(2);
                            payload = rs.getString(4);
                        }
                    }
                }
                if (payload == null) {
                    try (PreparedStatement ps = c.prepareStatement(
                            "SELECT pending + scheduled + running FROM pgq.queue_stats WHERE queue_name = ?")) {
                        ps.setString(1, queue);
                        try (ResultSet rs = ps.executeQuery()) {
                            rs.next();
                            if (rs.getLong(1) == 0)
                                break;
                        }
                    }
                    continue;
                }
                c.setAutoCommit(false);
                // jsonb goes in and out as text, cast in the SQL
                boolean held;
                try (PreparedStatement ps = c.prepareStatement(
                        "WITH p AS (SELECT (?::jsonb ->> 'n')::bigint AS n), "
                        + "s AS (INSERT INTO processed (id, block_id) SELECT n, ? FROM p) "
                        + "SELECT pgq.complete(?, result => jsonb_build_object('square', n * n), attempt => ?) FROM p")) {
                    ps.setString(1, payload);
                    ps.setLong(2, id);
                    ps.setLong(3, id);
                    ps.setInt(4, attempt);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        held = rs.getBoolean(1);
                    }
                }
                if (held)
                    c.commit();
                else
                    c.rollback();
                items++;
                System.out.println("item " + id + ": done (attempt " + attempt + ")");
            }
            System.out.println("queue " + queue + " is empty; this worker did " + items + " items");
        }
    }

    /* What bites: one line per trap, for the reader and for test/t/065_drivers.pl. */
    static void traps() throws SQLException {
        try (Connection c = connect(false)) {
            try (Statement s = c.createStatement()) {
                s.execute("SELECT pgq.create_group('jdbc_trap_lease', 'SELECT g FROM generate_series(1, 100) g', "
                    + "block_size => 10, mode => 'lease')");
            }
            // 1. setString for an interval
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT block_id FROM pgq.claim(?, wait => ?)")) {
                ps.setString(1, "jdbc_trap_lease");
                ps.setString(2, "1 second");
                ps.executeQuery().close();
                System.out.println("setString interval: no error");
            } catch (SQLException e) {
                System.out.println("setString interval: " + e.getSQLState() + " "
                    + e.getMessage().split("\n")[0]);
            }
            // ... and three ways that work (each claims a block, given back below)
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT count(*) FROM pgq.claim(?, wait => ?::interval)")) {
                ps.setString(1, "jdbc_trap_lease");
                ps.setString(2, "1 second");
                System.out.println("cast ?::interval: claimed " + count(ps));
            }
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT count(*) FROM pgq.claim(?, wait => ?)")) {
                ps.setString(1, "jdbc_trap_lease");
                ps.setObject(2, new org.postgresql.util.PGInterval("1 second"));
                System.out.println("PGInterval: claimed " + count(ps));
            }
            try (Connection u = connect(true);
                 PreparedStatement ps = u.prepareStatement(
                    "SELECT count(*) FROM pgq.claim(?, wait => ?)")) {
                ps.setString(1, "jdbc_trap_lease");
                ps.setString(2, "1 second");
                System.out.println("stringtype=unspecified: claimed " + count(ps));
            }
            // 2. a fetch size smaller than max_blocks: the claim runs whole at
            // the first fetch, and claims every block it returns
            long before = claimed(c);
            c.setAutoCommit(false);
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT block_id FROM pgq.claim('jdbc_trap_lease', max_blocks => 5)")) {
                ps.setFetchSize(1);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    c.commit();
                }
            }
            c.setAutoCommit(true);
            System.out.println("fetch size 1, max_blocks 5: read 1 row, "
                + (claimed(c) - before) + " blocks claimed");
            try (Statement s = c.createStatement()) {
                s.execute("SELECT pgq.drop_group('jdbc_trap_lease')");
            }
        }
    }

    static long claimed(Connection c) throws SQLException {
        try (Statement s = c.createStatement();
             ResultSet rs = s.executeQuery(
                "SELECT claimed FROM pgq.group_stats WHERE group_name = 'jdbc_trap_lease'")) {
            rs.next();
            return rs.getLong(1);
        }
    }

    static long count(PreparedStatement ps) throws SQLException {
        try (ResultSet rs = ps.executeQuery()) {
            rs.next();
            return rs.getLong(1);
        }
    }

    public static void main(String[] args) {
        try {
            if (args.length == 2 && args[0].equals("group"))
                group(args[1]);
            else if (args.length == 2 && args[0].equals("queue"))
                queue(args[1]);
            else if (args.length == 1 && args[0].equals("traps"))
                traps();
            else {
                System.err.println("usage: PgqWorker group NAME | queue NAME | traps");
                System.exit(2);
            }
        } catch (SQLException e) {
            System.err.println("error: " + e.getSQLState() + " " + e.getMessage());
            System.exit(1);
        }
    }
}
