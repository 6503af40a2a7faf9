// The Java reference for the echo benchmark: Apache Thrift's THsHaServer as Storm's
// Nimbus runs it (one selector thread, a pool of 64 workers, framed transport,
// binary protocol), serving `service Echo` of idl/demo.thrift.
//
// Built at benchmark time by bench_servers.py: `thrift --gen java` on idl/demo.thrift,
// then javac against Debian's libthrift-java (/usr/share/java/thrift.jar).
//
// Usage: java -cp <classes>:thrift.jar:slf4j-api.jar EchoHsHa PORT [WORKER_THREADS]
// Prints "listening PORT" once the socket is bound, then serves until killed.

import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.Collections;
import java.util.List;

import nimbus.demo.DemoError;
import nimbus.demo.Echo;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.THsHaServer;
import org.apache.thrift.server.TServer;
import org.apache.thrift.transport.TNonblockingServerSocket;

public final class EchoHsHa {
    /** Echo semantics as in nimbus_thrift.demo.EchoHandler; only echo is benchmarked. */
    static final class Handler implements Echo.Iface {
        @Override public String echo(String s) { return s; }
        @Override public ByteBuffer echo_binary(ByteBuffer data) { return data; }
        @Override public void ping() { }
        @Override public void notify(String event) { }
        @Override public List<String> events() { return Collections.emptyList(); }
        @Override public String fail(String kind) throws DemoError {
            throw new DemoError("fail(" + kind + ")", 42);
        }
        @Override public int sleep(int millis) { return millis; }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1 || args.length > 2) {
            System.err.println("usage: EchoHsHa PORT [WORKER_THREADS]");
            System.exit(64);
        }
        int port = Integer.parseInt(args[0]);
        // Storm's nimbus.thrift.threads defaults to 64.
        int workers = args.length > 1 ? Integer.parseInt(args[1]) : 64;

        TNonblockingServerSocket socket =
            new TNonblockingServerSocket(new InetSocketAddress("127.0.0.1", port));
        THsHaServer.Args serverArgs = new THsHaServer.Args(socket)
            // What the deprecated workerThreads(n) did: a fixed pool of n threads.
            .minWorkerThreads(workers)
            .maxWorkerThreads(workers)
            .processor(new Echo.Processor<>(new Handler()))
            .protocolFactory(new TBinaryProtocol.Factory());
        TServer server = new THsHaServer(serverArgs);
        Runtime.getRuntime().addShutdownHook(new Thread(server::stop, "stop"));
        System.out.println("listening " + socket.getPort());
        System.out.flush();
        server.serve();
    }
}
