// Publish unread events from a Java backend with Apache Kafka's own client, left at its defaults.
//
// The Java client partitions keyed records with murmur2: unread's default (`--partitioner murmur2`), nothing to set.
// Keep `partitioner.class` unset and `partitioner.ignore.keys` false (docs/producers.md).
//
//   java -cp 'kafka-clients.jar:jackson-databind.jar:…' JavaPublish.java BOOTSTRAP TOPIC_PREFIX EVENTS.jsonl
//
// Each line of EVENTS.jsonl is one event of the contract (docs/contract.md). It goes to its topic, keyed by the id the
// contract names: `conversation_id` (or `broadcast_id`) on the conversation topic, `user_id` on the user topic.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaPublish {
    static final Set<String> USER_EVENTS = Set.of("read.ack", "conversation.muted", "conversation.marked_unread",
        "broadcast.read", "notification.created", "notification.read", "notification.retracted", "notifications.seen",
        "notifications.read", "thread.read", "thread.followed", "reactions.read");

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("enable.idempotence", "true");
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        ObjectMapper json = new ObjectMapper();
        AtomicInteger failed = new AtomicInteger();
        int sent = 0;
        List<String> lines = Files.readAllLines(Path.of(args[2]));
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (String line : lines) {
                if (line.isBlank()) continue;
                JsonNode event = json.readTree(line);
                boolean user = USER_EVENTS.contains(event.get("type").asText());
                String topic = prefix + (user ? "unread.user-events" : "unread.conversation-events");
                JsonNode id = user ? event.get("user_id")
                    : event.has("conversation_id") ? event.get("conversation_id") : event.get("broadcast_id");
                producer.send(new ProducerRecord<>(topic, id.asText(), line), (meta, e) -> {
                    if (e != null) failed.incrementAndGet();
                });
                sent++;
            }
        }
        System.out.println(sent + " events sent, " + failed.get() + " failed");
        System.exit(failed.get() == 0 ? 0 : 1);
    }
}
