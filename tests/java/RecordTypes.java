import org.apache.kafka.coordinator.group.generated.CoordinatorRecordType;

/** Prints Kafka's own group-coordinator record types, one "id NAME" a line (for lagd's record vectors). */
public final class RecordTypes {
    public static void main(String[] args) {
        for (CoordinatorRecordType type : CoordinatorRecordType.values()) {
            System.out.println(type.id() + " " + type.name());
        }
    }
}
