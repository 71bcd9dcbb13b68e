import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A consumer for lagd's live agreement test that keeps its own record of every commit.
 *
 * Usage: Committer BOOTSTRAP GROUP TOPIC PROTOCOL (classic or consumer: KIP-848) EVERY_MS.
 * Reads TOPIC from the beginning and, every EVERY_MS, commits its positions with commitSync.
 * For each partition of each commit Kafka acknowledged it prints one line
 * "COMMIT SENT_MS ACKED_MS TOPIC PARTITION OFFSET" (wall clock, ms: when the commit was sent
 * and when it returned); a commit that failed prints "FAILED SENT_MS message". A line "stop"
 * on stdin (or stdin closing) makes it close and exit 0.
 */
public final class Committer {
    public static void main(String[] args) throws InterruptedException {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("group.protocol", args[3]);
        props.put("client.id", "java-" + args[1]);
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        long every = Long.parseLong(args[4]);
        AtomicBoolean stop = new AtomicBoolean(false);
        Thread commands = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                for (String line = in.readLine(); line != null && !line.equals("stop"); line = in.readLine()) {
                    // only "stop" is a command
                }
            } catch (IOException e) {
                // stdin closed: stop
            }
            stop.set(true);
        });
        commands.setDaemon(true);
        commands.start();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            long commitAt = System.currentTimeMillis();
            while (!stop.get()) {
                consumer.poll(Duration.ofMillis(100));
                if (System.currentTimeMillis() < commitAt || consumer.assignment().isEmpty()) {
                    continue;
                }
                commitAt = System.currentTimeMillis() + every;
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (TopicPartition tp : consumer.assignment()) {
                    offsets.put(tp, new OffsetAndMetadata(consumer.position(tp)));
                }
                long sent = System.currentTimeMillis();
                try {
                    consumer.commitSync(offsets);
                } catch (RuntimeException e) {
                    System.out.println("FAILED " + sent + " " + e);
                    System.out.flush();
                    continue;
                }
                long acked = System.currentTimeMillis();
                StringBuilder out = new StringBuilder();
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                    out.append("COMMIT ").append(sent).append(' ').append(acked).append(' ')
                        .append(e.getKey().topic()).append(' ').append(e.getKey().partition()).append(' ')
                        .append(e.getValue().offset()).append('\n');
                }
                System.out.print(out);
                System.out.flush();
            }
        }
    }
}
