import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.data.Stat;

/**
 * A lockcompare external lock client (protocol 1, docs/clients.md): Apache Curator's
 * {@code InterProcessMutex} on ZooKeeper, as its documentation shows it:
 *
 * <pre>
 *   CuratorFramework client = CuratorFrameworkFactory.newClient(hosts, sessionTimeoutMs, connectionTimeoutMs, retry);
 *   client.start();
 *   InterProcessMutex lock = new InterProcessMutex(client, path);
 *   if (lock.acquire(time, unit)) { try { ... } finally { lock.release(); } }
 * </pre>
 *
 * What is configured, and why (everything else is Curator's default):
 * <ul>
 *   <li>session timeout = the lock's TTL (Curator's default is 60 s), so --time-scale scales it as it
 *       scales every lease; the negotiated timeout is checked (a server granting another is an error);</li>
 *   <li>one attempt: {@code RetryNTimes(0, 0)} (Curator's examples retry with back-off; the harness
 *       retries), and {@code acquire(time, unit)} waits at most one TTL (at most half the request
 *       timeout) for its predecessor, as kazoo's recipe is run by lockcompare's zk-lock;</li>
 *   <li>connection timeout = the harness's request timeout (at most the session timeout);</li>
 *   <li>no ensemble tracker: the harness decides which address a worker reaches (its links may run
 *       through proxies), and the tracker would replace them with the servers' own;</li>
 *   <li>the znodes' data names this client's pid (Curator's default: the local IP address).</li>
 * </ul>
 *
 * The lock lives where lockcompare's kazoo backend keeps it, {@code /lockcompare/<key>} (a "/" in the
 * key becomes "_"), so the session-kill fault finds the holder's session there. The lease has no
 * deadline: the znode lives as long as its session; the server ends the session once it has not heard
 * from the client for the session timeout.
 *
 * Events (asked by the harness after each round): every connection state change (CONNECTED,
 * SUSPENDED, RECONNECTED, LOST, READ_ONLY: {@code ConnectionStateListener}) and every heartbeat
 * (ZooKeeper's ping) the client got an answer to: the session is the lease and the pings renew it. Curator has no hook for pings; ZooKeeper's client logs each answered ping at debug
 * level ("Got ping response for session id: 0x.. after N ms") through SLF4J, which runs here on
 * java.util.logging (slf4j-jdk14): a JUL handler on that one logger turns the line into an event
 * whose t0 is when the ping went out (t1 minus ZooKeeper's own N ms). The library is not changed.
 *
 * All times are System.nanoTime(), CLOCK_MONOTONIC on Linux.
 */
public final class CuratorMutexClient {
    static final int PROTOCOL = 1;
    /** Where lockcompare keeps its znodes (infra/zookeeper/server.py: CHROOT, lock_path). */
    static final String ROOT = "/lockcompare/";

    private static final Pattern PING = Pattern.compile("Got ping response for session id: 0x([0-9a-fA-F]+) after (\\d+)ms");
    /** What each lock znode holds (Curator's default: the local IP address): this client's pid, which the
     *  history's client event names, so a session-kill's "identifier" says whose session it ended. */
    static final byte[] IDENTITY = ("curator-mutex pid " + ProcessHandle.current().pid()).getBytes(StandardCharsets.UTF_8);
    /** JUL keeps loggers by weak reference: a configured one must be held. */
    private static final Logger ZK_LOG = Logger.getLogger("org.apache.zookeeper.ClientCnxn");

    private final Writer out = new OutputStreamWriter(new FileOutputStream(FileDescriptor.out), StandardCharsets.UTF_8);
    private final SecureRandom random = new SecureRandom();
    private final Map<Integer, Session> sessions = new ConcurrentHashMap<>(); // by session timeout (ms)
    private final Map<String, Held> held = new ConcurrentHashMap<>(); // owner -> its lock
    private final List<Map<String, Object>> events = new ArrayList<>(); // guarded by itself
    private String hosts = "";
    private int requestTimeoutMs = 2000;

    /** One CuratorFramework (one ZooKeeper session at a time) for one session timeout. */
    final class Session {
        final CuratorFramework client;
        final int timeoutMs;
        volatile ConnectionState state = null;
        /** When the latest SUSPENDED / LOST was seen (0: never), and which it was. */
        volatile long troubleNs = 0;
        volatile String trouble = "";

        Session(int timeoutMs) {
            this.timeoutMs = timeoutMs;
            this.client = CuratorFrameworkFactory.builder()
                .connectString(hosts)
                .sessionTimeoutMs(timeoutMs)
                .connectionTimeoutMs(Math.min(requestTimeoutMs, timeoutMs))
                .retryPolicy(new RetryNTimes(0, 0))
                .ensembleTracker(false)
                .defaultData(IDENTITY)
                .build();
            client.getConnectionStateListenable().addListener((c, newState) -> onState(this, newState));
        }

        long sessionId() {
            try {
                return client.getZookeeperClient().getZooKeeper().getSessionId();
            } catch (Exception e) {
                return 0;
            }
        }
    }

    /** A granted lock: its mutex, the one thread that may release it (InterProcessMutex is thread-bound). */
    static final class Held {
        final InterProcessMutex mutex;
        final ExecutorService thread;
        final Session session;
        final long sessionId;
        final String path;
        final long grantedNs;

        Held(InterProcessMutex mutex, ExecutorService thread, Session session, long sessionId, String path, long grantedNs) {
            this.mutex = mutex;
            this.thread = thread;
            this.session = session;
            this.sessionId = sessionId;
            this.path = path;
            this.grantedNs = grantedNs;
        }
    }

    /** InterProcessMutex with its znode's path readable (the owner names it; release checks it). */
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String nodePath() {
            return getLockPath();
        }
    }

    public static void main(String[] args) throws Exception {
        configureLogging();
        warmUp();
        new CuratorMutexClient().serve(System.in);
    }

    /** WARNING and above to stderr (the harness keeps its last lines); ZooKeeper's ping lines to us. */
    private static void configureLogging() {
        Logger root = Logger.getLogger("");
        root.setLevel(Level.WARNING);
        ZK_LOG.setLevel(Level.FINE); // slf4j-jdk14: debug is FINE
        ZK_LOG.setUseParentHandlers(false);
        ZK_LOG.addHandler(new Handler() {
            @Override
            public void publish(LogRecord record) {
                if (record.getLevel().intValue() >= Level.WARNING.intValue()) {
                    System.err.println(record.getLevel() + " " + record.getLoggerName() + ": " + record.getMessage());
                    return;
                }
                String message = record.getMessage();
                if (message == null || !message.startsWith("Got ping response")) {
                    return;
                }
                Matcher m = PING.matcher(message);
                if (m.find() && instance != null) {
                    instance.onPing(Long.parseUnsignedLong(m.group(1), 16), Long.parseLong(m.group(2)));
                }
            }

            @Override
            public void flush() {}

            @Override
            public void close() {}
        });
    }

    /** Load Curator's and ZooKeeper's classes while the harness waits for hello, not inside the first acquire. */
    private static void warmUp() {
        Thread t = new Thread(() -> {
            try {
                CuratorFrameworkFactory.builder().connectString("127.0.0.1:1").build();
                Class.forName("org.apache.curator.framework.recipes.locks.LockInternals");
                Class.forName("org.apache.zookeeper.ClientCnxn");
            } catch (Throwable ignored) {
                // only a warm-up
            }
        }, "warm-up");
        t.setDaemon(true);
        t.start();
    }

    private static volatile CuratorMutexClient instance;

    private void serve(InputStream input) throws Exception {
        instance = this;
        BufferedReader in = new BufferedReader(new InputStreamReader(input, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            Map<String, Object> request;
            try {
                request = Json.parseObject(line);
            } catch (RuntimeException e) {
                System.err.println("not a request: " + line);
                continue;
            }
            Map<String, Object> reply = new LinkedHashMap<>();
            reply.put("id", request.get("id"));
            String op = String.valueOf(request.get("op"));
            try {
                handle(op, request, reply);
            } catch (Exception e) {
                reply.put("ok", false);
                reply.put("reason", "error");
                reply.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
            }
            send(reply);
            if (op.equals("close")) {
                break;
            }
        }
        shutdown();
    }

    private void send(Map<String, Object> reply) throws Exception {
        synchronized (out) {
            out.write(Json.write(reply));
            out.write('\n');
            out.flush();
        }
    }

    private void handle(String op, Map<String, Object> rq, Map<String, Object> reply) throws Exception {
        switch (op) {
            case "hello": hello(rq, reply); break;
            case "acquire": acquire(str(rq, "key"), (int) num(rq, "ttl_ms"), reply); break;
            case "release": release(str(rq, "owner"), reply); break;
            case "check": check(str(rq, "owner"), reply); break;
            case "events": drainEvents(reply); break;
            case "close": reply.put("ok", true); break;
            default:
                reply.put("ok", false);
                reply.put("reason", "error");
                reply.put("error", "unknown op " + op);
        }
    }

    // --- hello -----------------------------------------------------------------------------------

    private void hello(Map<String, Object> rq, Map<String, Object> reply) {
        long protocol = num(rq, "protocol");
        List<String> urls = new ArrayList<>();
        Object nodes = rq.get("nodes");
        if (nodes instanceof List) {
            for (Object url : (List<?>) nodes) {
                urls.add(String.valueOf(url).replaceFirst("^zk://", "").replaceAll("/+$", ""));
            }
        }
        hosts = String.join(",", urls);
        if (rq.get("request_timeout_ms") != null) {
            requestTimeoutMs = (int) num(rq, "request_timeout_ms");
        }
        reply.put("ok", protocol == PROTOCOL);
        if (protocol != PROTOCOL) {
            reply.put("error", "this client speaks protocol " + PROTOCOL);
        }
        reply.put("protocol", PROTOCOL);
        reply.put("library", "curator-recipes InterProcessMutex");
        String curator = mavenVersion("curator-recipes");
        String zookeeper = org.apache.zookeeper.Version.getFullVersion().split("[- ]")[0];
        reply.put("version", curator + " (zookeeper " + zookeeper + ")");
        // What each row records (docs/clients.md): the recipe's jar and the ZooKeeper client under it.
        Map<String, Object> versions = new LinkedHashMap<>();
        versions.put("curator-recipes", curator);
        versions.put("zookeeper", zookeeper);
        reply.put("versions", versions);
        reply.put("runtime", "java " + System.getProperty("java.version"));
        if (protocol == PROTOCOL) {
            warmUpLock();
        }
        reply.put("monotonic_ns", System.nanoTime());
    }

    /**
     * One lock taken and given back on a znode of this client's own, in a session of its own, before
     * the harness's first request. Curator's first acquire in a JVM took a median 415 ms more than its
     * later ones in the committed reproduction's baseline trials (every other backend under 15 ms): the
     * recipe's classes loaded and its path run for the first time, which the timing sentinel read as a
     * stall inside the trial. Best effort within the request timeout, its errors dropped: a node that
     * is down is the first acquire's to report (connect lazily, docs/clients.md).
     */
    private void warmUpLock() {
        if (hosts.isEmpty()) {
            return;
        }
        String path = ROOT + "warm-up-" + ProcessHandle.current().pid();
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString(hosts)
            .sessionTimeoutMs(Math.max(2000, requestTimeoutMs))
            .connectionTimeoutMs(requestTimeoutMs)
            .retryPolicy(new RetryNTimes(0, 0))
            .ensembleTracker(false)
            .defaultData(IDENTITY)
            .build();
        try {
            client.start();
            if (client.blockUntilConnected(requestTimeoutMs, TimeUnit.MILLISECONDS)) {
                Mutex mutex = new Mutex(client, path);
                if (mutex.acquire(requestTimeoutMs, TimeUnit.MILLISECONDS)) {
                    mutex.nodePath();
                    mutex.release();
                }
                client.delete().quietly().forPath(path);
            }
        } catch (Exception ignored) {
            // only a warm-up
        } finally {
            client.close();
        }
    }

    /** The jar's own version: its Maven pom.properties, else its manifest's Implementation-Version, else "unknown". */
    private static String mavenVersion(String artifact) {
        String resource = "/META-INF/maven/org.apache.curator/" + artifact + "/pom.properties";
        try (InputStream in = CuratorFramework.class.getResourceAsStream(resource)) {
            if (in == null) {
                String implementation = InterProcessMutex.class.getPackage().getImplementationVersion();
                return implementation != null ? implementation : "unknown";
            }
            Properties props = new Properties();
            props.load(in);
            return props.getProperty("version", "unknown");
        } catch (Exception e) {
            return "unknown";
        }
    }

    // --- the lock ----------------------------------------------------------------------------

    /** The session for this timeout, started and connected (null: not connected within the request timeout). */
    private Session session(int timeoutMs) throws Exception {
        Session s = sessions.get(timeoutMs);
        if (s == null) {
            s = new Session(timeoutMs);
            sessions.put(timeoutMs, s);
            s.client.start();
        }
        if (!s.client.getZookeeperClient().isConnected()
            && !s.client.blockUntilConnected(Math.min(requestTimeoutMs, timeoutMs), TimeUnit.MILLISECONDS)) {
            return null;
        }
        int negotiated = s.client.getZookeeperClient().getZooKeeper().getSessionTimeout();
        if (negotiated != timeoutMs) {
            throw new IllegalStateException("ZooKeeper granted a " + negotiated + " ms session when asked for " + timeoutMs + " ms");
        }
        return s;
    }

    private void acquire(String key, int ttlMs, Map<String, Object> reply) throws Exception {
        long t0 = System.nanoTime();
        Session s = session(ttlMs);
        if (s == null) {
            refuse(reply, "error", "not connected to ZooKeeper within " + Math.min(requestTimeoutMs, ttlMs) + " ms", t0);
            return;
        }
        Mutex mutex = new Mutex(s.client, ROOT + key.replace('/', '_'));
        ExecutorService thread = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "lock " + key);
            t.setDaemon(true);
            return t;
        });
        long waitMs = Math.max(0, Math.min(ttlMs, requestTimeoutMs / 2));
        // The znode's path is per thread in Curator (getLockPath): read it on the thread that acquired.
        Future<String> attempt = thread.submit(() -> mutex.acquire(waitMs, TimeUnit.MILLISECONDS) ? mutex.nodePath() : null);
        String path;
        try {
            path = attempt.get(requestTimeoutMs, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            // Still waiting: nobody will hold what it may yet get, so its own thread gives it back.
            thread.submit(() -> {
                if (mutex.isOwnedByCurrentThread()) {
                    mutex.release();
                }
                return null;
            });
            thread.shutdown();
            refuse(reply, "error", "acquire did not return within " + requestTimeoutMs + " ms", t0);
            return;
        } catch (java.util.concurrent.ExecutionException e) {
            thread.shutdown();
            Throwable cause = e.getCause() == null ? e : e.getCause();
            refuse(reply, "error", cause.getClass().getSimpleName() + ": " + cause.getMessage(), t0);
            return;
        }
        if (path == null) {
            thread.shutdown();
            refuse(reply, "held", null, t0);
            return;
        }
        long now = System.nanoTime();
        // The session the znode belongs to, read after the grant (Curator re-creates a session that
        // expired during the attempt, and the znode in it).
        long sessionId = s.sessionId();
        String node = path.substring(path.lastIndexOf('/') + 1);
        String owner = String.format("%016x.%x.%s", random.nextLong(), sessionId, node);
        held.put(owner, new Held(mutex, thread, s, sessionId, path, now));
        reply.put("ok", true);
        reply.put("owner", owner);
        reply.put("valid_until", null); // no deadline: held while the session lives
        reply.put("library_ns", now - t0);
    }

    private static void refuse(Map<String, Object> reply, String reason, String error, long t0) {
        reply.put("ok", false);
        reply.put("reason", reason);
        if (error != null) {
            reply.put("error", error);
        }
        reply.put("library_ns", System.nanoTime() - t0);
    }

    /**
     * Curator's release, on the thread that acquired. {@code released} is true only if our znode was
     * still there, in our session, right before it: Curator's release ignores a znode that is already
     * gone (the session ended), so it alone cannot say whether this call released the lock.
     */
    private void release(String owner, Map<String, Object> reply) throws Exception {
        long t0 = System.nanoTime();
        Held h = held.remove(owner);
        if (h == null) {
            reply.put("ok", true);
            reply.put("released", false);
            return;
        }
        boolean ours;
        boolean done = false;
        try {
            Future<Boolean> call = h.thread.submit(() -> {
                Stat stat = h.session.client.checkExists().forPath(h.path);
                boolean mine = stat != null && stat.getEphemeralOwner() == h.sessionId;
                h.mutex.release();
                return mine;
            });
            ours = call.get(requestTimeoutMs, TimeUnit.MILLISECONDS);
            done = true;
        } catch (Exception e) {
            ours = false; // connection lost, or no answer in time: Curator's guaranteed delete goes on
        } finally {
            h.thread.shutdown();
        }
        reply.put("ok", true);
        reply.put("released", ours && done);
        reply.put("library_ns", System.nanoTime() - t0);
    }

    /**
     * What a careful Curator user looks at before writing (Curator's advice: treat SUSPENDED as a
     * possible loss): valid only while connected on the session that took the lock, with no
     * SUSPENDED or LOST seen since the grant. No request is made: a client frozen past its session
     * timeout may wake still believing it is connected.
     */
    private void check(String owner, Map<String, Object> reply) {
        Held h = held.get(owner);
        reply.put("ok", true);
        String problem = null;
        if (h == null) {
            problem = "lost";
        } else if (h.session.sessionId() != h.sessionId) {
            problem = "lost";
        } else if (!h.session.client.getZookeeperClient().isConnected()) {
            problem = "suspended";
        } else if (h.session.troubleNs >= h.grantedNs) {
            problem = h.session.trouble;
        }
        reply.put("valid", problem == null);
        if (problem != null) {
            reply.put("reason", problem);
        } else {
            reply.put("valid_until", null);
        }
    }

    // --- events ------------------------------------------------------------------------------

    private void onState(Session s, ConnectionState state) {
        long now = System.nanoTime();
        s.state = state;
        boolean ok = state == ConnectionState.CONNECTED || state == ConnectionState.RECONNECTED;
        if (state == ConnectionState.SUSPENDED || state == ConnectionState.LOST) {
            s.trouble = state == ConnectionState.LOST ? "lost" : "suspended";
            s.troubleNs = now;
        }
        record(s, now, now, ok, state.name().toLowerCase().replace('_', '-'));
    }

    /** An answered ping: the session (and every lock held in it) lives on. Recorded held or not, so that a
     *  history shows the heartbeats' rhythm around a pause, and their absence inside it. */
    private void onPing(long sessionId, long afterMs) {
        long now = System.nanoTime();
        for (Session s : sessions.values()) {
            if (s.sessionId() == sessionId) {
                record(s, now - afterMs * 1_000_000L, now, true, "ping");
            }
        }
    }

    /** One event per lock held in this session (owner "" when none is held). */
    private void record(Session s, long t0, long t1, boolean ok, String reason) {
        List<String> owners = new ArrayList<>();
        for (Map.Entry<String, Held> entry : held.entrySet()) {
            if (entry.getValue().session == s) {
                owners.add(entry.getKey());
            }
        }
        if (owners.isEmpty()) {
            owners.add("");
        }
        synchronized (events) {
            for (String owner : owners) {
                Map<String, Object> event = new LinkedHashMap<>();
                event.put("t0", t0);
                event.put("t1", t1);
                event.put("ok", ok);
                event.put("owner", owner);
                event.put("valid_until", null);
                event.put("reason", reason);
                events.add(event);
            }
        }
    }

    private void drainEvents(Map<String, Object> reply) {
        List<Map<String, Object>> drained;
        synchronized (events) {
            drained = new ArrayList<>(events);
            events.clear();
        }
        reply.put("ok", true);
        reply.put("events", drained);
    }

    // --- the end -------------------------------------------------------------------------------

    /** Close every session (its znodes go at once), within a second; then exit. */
    private void shutdown() {
        Thread closer = new Thread(() -> sessions.values().forEach(s -> s.client.close()), "close");
        closer.setDaemon(true);
        closer.start();
        try {
            closer.join(1000);
        } catch (InterruptedException ignored) {
            // exiting anyway
        }
        System.exit(0);
    }

    private static String str(Map<String, Object> rq, String name) {
        Object value = rq.get(name);
        if (!(value instanceof String)) {
            throw new IllegalArgumentException(name + " missing");
        }
        return (String) value;
    }

    private static long num(Map<String, Object> rq, String name) {
        Object value = rq.get(name);
        if (value instanceof Number) {
            return ((Number) value).longValue();
        }
        if (value instanceof String && ((String) value).matches("-?\\d+")) {
            return Long.parseLong((String) value);
        }
        throw new IllegalArgumentException(name + " missing");
    }
}
