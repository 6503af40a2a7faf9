// A Storm 2.x Nimbus client in Java, for tests/interop/test_interop_storm2.py: Apache
// Thrift's Java library and the classes `thrift --gen java` makes of idl/nimbus.thrift
// (which follows Storm 2.8's storm.thrift). Java's generated readers check required
// fields, so every reply read here has all of its required fields.
//
// Usage: StormTwoClient HOST PORT CODE_ZIP NAME BLOB_IN BLOB_OUT
// Prints key=value lines: submitted, summaries, byName, info, leader, logConfig,
// logRemoved, page, pageFigures, infoFigures, componentPage, unsupported, blobMeta,
// blobDownload, blobList, blobDeleted, killed. The blob round trip uploads BLOB_IN and
// writes what it downloads to BLOB_OUT.

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import nimbus.thrift.generated.AccessControl;
import nimbus.thrift.generated.AccessControlType;
import nimbus.thrift.generated.BeginDownloadResult;
import nimbus.thrift.generated.Bolt;
import nimbus.thrift.generated.BoltAggregateStats;
import nimbus.thrift.generated.ComponentAggregateStats;
import nimbus.thrift.generated.ComponentPageInfo;
import nimbus.thrift.generated.ComponentCommon;
import nimbus.thrift.generated.ComponentObject;
import nimbus.thrift.generated.ExecutorSummary;
import nimbus.thrift.generated.GetInfoOptions;
import nimbus.thrift.generated.GlobalStreamId;
import nimbus.thrift.generated.Grouping;
import nimbus.thrift.generated.KeyNotFoundException;
import nimbus.thrift.generated.KillOptions;
import nimbus.thrift.generated.ListBlobsResult;
import nimbus.thrift.generated.LogConfig;
import nimbus.thrift.generated.LogLevel;
import nimbus.thrift.generated.LogLevelAction;
import nimbus.thrift.generated.Nimbus;
import nimbus.thrift.generated.NodeInfo;
import nimbus.thrift.generated.NullStruct;
import nimbus.thrift.generated.NumErrorsChoice;
import nimbus.thrift.generated.ProfileAction;
import nimbus.thrift.generated.ProfileRequest;
import nimbus.thrift.generated.ReadableBlobMeta;
import nimbus.thrift.generated.SettableBlobMeta;
import nimbus.thrift.generated.ShellComponent;
import nimbus.thrift.generated.SpoutSpec;
import nimbus.thrift.generated.StateSpoutSpec;
import nimbus.thrift.generated.StormTopology;
import nimbus.thrift.generated.StreamInfo;
import nimbus.thrift.generated.SubmitOptions;
import nimbus.thrift.generated.TopologyInfo;
import nimbus.thrift.generated.TopologyInitialStatus;
import nimbus.thrift.generated.TopologyPageInfo;
import nimbus.thrift.generated.TopologySummary;
import org.apache.thrift.TApplicationException;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.layered.TFramedTransport;

public class StormTwoClient {
    // Storm's own chunk size (StormSubmitter).
    private static final int CHUNK_BYTES = 307200;
    // Blob chunks this small, so an upload takes several calls.
    private static final int BLOB_CHUNK_BYTES = 1000;
    // Storm's ACL bits.
    private static final int READ = 1;
    private static final int TIMEOUT_MS = 10000;
    private static final long KILL_DEADLINE_MS = 10000;

    private static ComponentObject shell(String script) {
        return ComponentObject.shell(new ShellComponent("python", "wordcount.components." + script));
    }

    private static Map<String, StreamInfo> streams(String... fields) {
        return Collections.singletonMap("default", new StreamInfo(Arrays.asList(fields), false));
    }

    private static Map<GlobalStreamId, Grouping> from(String component, Grouping grouping) {
        return Collections.singletonMap(new GlobalStreamId(component, "default"), grouping);
    }

    // sentences -> split (shuffle) -> count (fields "word"); executors 1 + 2 + 3, and
    // count has 6 tasks (so 9 in all).
    private static StormTopology wordcount() {
        Map<String, SpoutSpec> spouts = new HashMap<>();
        spouts.put("sentences", new SpoutSpec(shell("SentenceSpout"),
            new ComponentCommon(Collections.emptyMap(), streams("sentence")).setParallelism_hint(1)));
        Map<String, Bolt> bolts = new HashMap<>();
        bolts.put("split", new Bolt(shell("SplitBolt"),
            new ComponentCommon(from("sentences", Grouping.shuffle(new NullStruct())),
                                streams("word")).setParallelism_hint(2)));
        bolts.put("count", new Bolt(shell("CountBolt"),
            new ComponentCommon(from("split", Grouping.fields(Arrays.asList("word"))),
                                streams("word", "count"))
                .setParallelism_hint(3).setJson_conf("{\"topology.tasks\": 6}")));
        return new StormTopology(spouts, bolts, new HashMap<String, StateSpoutSpec>());
    }

    // "component emitted executed" of each component, sorted, from getTopologyInfo's
    // executors (summed) or from page info's aggregates.
    private static String infoFigures(TopologyInfo info) {
        Map<String, long[]> sums = new TreeMap<>();
        for (ExecutorSummary e : info.getExecutors()) {
            if (e.getStats() == null) {
                continue;
            }
            long[] sum = sums.computeIfAbsent(e.getComponent_id(), k -> new long[2]);
            for (long n : e.getStats().getEmitted().get(":all-time").values()) {
                sum[0] += n;
            }
            if (e.getStats().getSpecific().isSetBolt()) {
                for (long n : e.getStats().getSpecific().getBolt().getExecuted()
                        .get(":all-time").values()) {
                    sum[1] += n;
                }
            }
        }
        StringBuilder out = new StringBuilder();
        for (Map.Entry<String, long[]> entry : sums.entrySet()) {
            out.append(entry.getKey()).append(' ').append(entry.getValue()[0]).append(' ')
                .append(entry.getValue()[1]).append(';');
        }
        return out.toString();
    }

    private static String pageFigures(TopologyPageInfo page) {
        Map<String, long[]> sums = new TreeMap<>();
        for (Map.Entry<String, ComponentAggregateStats> entry
                : page.getId_to_spout_agg_stats().entrySet()) {
            sums.put(entry.getKey(), new long[] {
                entry.getValue().getCommon_stats().getEmitted(), 0});
        }
        for (Map.Entry<String, ComponentAggregateStats> entry
                : page.getId_to_bolt_agg_stats().entrySet()) {
            BoltAggregateStats bolt = entry.getValue().getSpecific_stats().getBolt();
            sums.put(entry.getKey(), new long[] {
                entry.getValue().getCommon_stats().getEmitted(), bolt.getExecuted()});
        }
        StringBuilder out = new StringBuilder();
        for (Map.Entry<String, long[]> entry : sums.entrySet()) {
            out.append(entry.getKey()).append(' ').append(entry.getValue()[0]).append(' ')
                .append(entry.getValue()[1]).append(';');
        }
        return out.toString();
    }

    // Log levels of a submitted topology: set, read back, one removed.
    private static void logLevels(Nimbus.Client client, String id) throws Exception {
        LogConfig config = new LogConfig();
        config.putToNamed_logger_level("ROOT", new LogLevel(LogLevelAction.UPDATE)
            .setTarget_log_level("DEBUG").setReset_log_level_timeout_secs(30));
        config.putToNamed_logger_level("wordcount.components",
            new LogLevel(LogLevelAction.UPDATE).setTarget_log_level("WARN"));
        client.setLogConfig(id, config);
        LogLevel root = client.getLogConfig(id).getNamed_logger_level().get("ROOT");
        System.out.println("logConfig=" + root.getAction() + " " + root.getTarget_log_level()
            + " " + root.getReset_log_level_timeout_secs() + " "
            + root.getReset_log_level_timeout_epoch());
        LogConfig remove = new LogConfig();
        remove.putToNamed_logger_level("wordcount.components",
            new LogLevel(LogLevelAction.REMOVE));
        client.setLogConfig(id, remove);
        System.out.println("logRemoved=" + String.join(",", new TreeMap<>(
            client.getLogConfig(id).getNamed_logger_level()).keySet()));
    }

    // Page info of a submitted topology and of one of its components.
    private static void pages(Nimbus.Client client, String id) throws Exception {
        TopologyPageInfo page = client.getTopologyPageInfo(id, ":all-time", false);
        System.out.println("page=" + page.getId() + " " + page.getName() + " "
            + page.getStatus() + " " + page.getNum_executors() + " " + page.getNum_tasks());
        System.out.println("pageFigures=" + pageFigures(page));
        System.out.println("infoFigures=" + infoFigures(client.getTopologyInfo(id)));
        ComponentPageInfo component = client.getComponentPageInfo(id, "split", "600", false);
        System.out.println("componentPage=" + component.getComponent_id() + " "
            + component.getComponent_type() + " " + component.getNum_executors() + " "
            + component.getExec_statsSize());
    }

    // A blob round trip: create (everyone may read), upload in chunks, finish, read the
    // metadata, download, list, delete.
    private static void blobs(Nimbus.Client client, String key, byte[] data, String out)
            throws Exception {
        List<AccessControl> acl = new ArrayList<>();
        acl.add(new AccessControl(AccessControlType.OTHER, READ));
        String session = client.beginCreateBlob(key, new SettableBlobMeta(acl));
        for (int i = 0; i < data.length; i += BLOB_CHUNK_BYTES) {
            int end = Math.min(data.length, i + BLOB_CHUNK_BYTES);
            client.uploadBlobChunk(session, ByteBuffer.wrap(Arrays.copyOfRange(data, i, end)));
        }
        client.finishBlobUpload(session);

        ReadableBlobMeta meta = client.getBlobMeta(key);
        List<String> entries = new ArrayList<>();
        for (AccessControl entry : meta.getSettable().getAcl()) {
            entries.add(entry.getType() + ":" + (entry.isSetName() ? entry.getName() : "")
                + ":" + entry.getAccess());
        }
        Collections.sort(entries);
        System.out.println("blobMeta=" + meta.getVersion() + " "
            + meta.getSettable().getReplication_factor() + " " + String.join(",", entries));

        BeginDownloadResult begun = client.beginBlobDownload(key);
        ByteArrayOutputStream content = new ByteArrayOutputStream();
        int chunks = 0;
        while (true) {
            ByteBuffer chunk = client.downloadBlobChunk(begun.getSession());
            if (!chunk.hasRemaining()) {
                break;
            }
            byte[] bytes = new byte[chunk.remaining()];
            chunk.get(bytes);
            content.write(bytes);
            chunks++;
        }
        Files.write(Paths.get(out), content.toByteArray());
        System.out.println("blobDownload=" + begun.getVersion() + " " + begun.getData_size()
            + " " + chunks);

        ListBlobsResult listed = client.listBlobs("");
        System.out.println("blobList=" + String.join(",", listed.getKeys()) + " then "
            + client.listBlobs(listed.getSession()).getKeysSize());

        client.deleteBlob(key);
        try {
            client.getBlobMeta(key);
            System.out.println("blobDeleted=still there");
        } catch (KeyNotFoundException e) {
            System.out.println("blobDeleted=KeyNotFoundException");
        }
    }

    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        byte[] code = Files.readAllBytes(Paths.get(args[2]));
        String name = args[3];
        byte[] blob = Files.readAllBytes(Paths.get(args[4]));
        String blobOut = args[5];

        TSocket socket = new TSocket(host, port, TIMEOUT_MS);
        TFramedTransport transport = new TFramedTransport(socket);
        transport.open();
        try {
            Nimbus.Client client = new Nimbus.Client(new TBinaryProtocol(transport));

            String location = client.beginFileUpload();
            for (int i = 0; i < code.length; i += CHUNK_BYTES) {
                int end = Math.min(code.length, i + CHUNK_BYTES);
                client.uploadChunk(location, ByteBuffer.wrap(Arrays.copyOfRange(code, i, end)));
            }
            client.finishFileUpload(location);
            client.submitTopologyWithOpts(name, location, "{\"topology.workers\": 2}", wordcount(),
                new SubmitOptions(TopologyInitialStatus.ACTIVE));

            List<TopologySummary> summaries = client.getTopologySummaries();
            TopologySummary summary = summaries.get(0);
            System.out.println("submitted=" + summary.getId());
            System.out.println("summaries=" + summary.getId() + " " + summary.getName() + " "
                + summary.getStatus() + " " + summary.getNum_executors() + " "
                + summary.getNum_tasks());
            System.out.println("byName=" + client.getTopologySummaryByName(name).getId());

            GetInfoOptions options = new GetInfoOptions().setNum_err_choice(NumErrorsChoice.ONE);
            TopologyInfo info = client.getTopologyInfoByNameWithOpts(name, options);
            System.out.println("info=" + info.getId() + " " + info.getStatus() + " "
                + info.getExecutorsSize());
            System.out.println("leader=" + client.getLeader().getVersion());
            client.getClusterInfo();

            logLevels(client, summary.getId());
            pages(client, summary.getId());

            try {
                client.setWorkerProfiler(summary.getId(), new ProfileRequest(
                    new NodeInfo(host, new HashSet<>(Arrays.asList(6700L))),
                    ProfileAction.JSTACK_DUMP));
                System.out.println("unsupported=accepted");
            } catch (TApplicationException e) {
                System.out.println("unsupported=" + e.getMessage());
            }

            blobs(client, name + "-blob", blob, blobOut);

            client.killTopologyWithOpts(name, new KillOptions().setWait_secs(0));
            long deadline = System.currentTimeMillis() + KILL_DEADLINE_MS;
            String killed = "still listed";
            while (System.currentTimeMillis() < deadline) {
                if (client.getTopologySummaries().isEmpty()) {
                    killed = "removed";
                    break;
                }
                Thread.sleep(20);
            }
            System.out.println("killed=" + killed);
        } finally {
            transport.close();
        }
    }
}
