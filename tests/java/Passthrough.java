import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;

/**
 * A Kafka Streams application for lagd's tests: copies every record of one topic to another.
 *
 * Usage: Passthrough BOOTSTRAP APPLICATION_ID SOURCE SINK PROTOCOL (classic or streams).
 * Prints RUNNING once the application runs; stops cleanly (committing) on SIGTERM. A line
 * "pause" on stdin pauses processing (KafkaStreams.pause: the members stay in the group, so
 * its lag can be read while it holds still) and prints PAUSED; "resume" resumes, printing RESUMED.
 */
public final class Passthrough {
    public static void main(String[] args) throws InterruptedException {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, args[4]);
        props.put(StreamsConfig.CLIENT_ID_CONFIG, "streams-" + args[1]);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 500);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.STATE_DIR_CONFIG, System.getProperty("java.io.tmpdir") + "/lagd-streams-" + args[1]);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2]).to(args[3]);
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                System.out.println("RUNNING");
                System.out.flush();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            stopped.countDown();
        }));
        streams.start();
        Thread commands = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                for (String line = in.readLine(); line != null; line = in.readLine()) {
                    if (line.equals("pause")) {
                        streams.pause();
                        System.out.println("PAUSED");
                    } else if (line.equals("resume")) {
                        streams.resume();
                        System.out.println("RESUMED");
                    }
                    System.out.flush();
                }
            } catch (IOException e) {
                // stdin closed: no more commands
            }
        });
        commands.setDaemon(true);
        commands.start();
        stopped.await();
    }
}
