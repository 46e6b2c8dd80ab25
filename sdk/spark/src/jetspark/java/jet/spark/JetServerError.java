package jet.spark;

import java.io.IOException;

import com.fasterxml.jackson.databind.JsonNode;

/** An error frame from a jet server (spec/protocol.md, "Error responses"). */
final class JetServerError extends IOException {
  static final int OFFSET_OUT_OF_RANGE = 9;
  static final int NOT_LEADER = 11;

  final int code;
  final String name;
  final JsonNode details;

  JetServerError(int code, String name, String message, JsonNode details) {
    super("jet server error " + name + " (" + code + "): " + message);
    this.code = code;
    this.name = name;
    this.details = details;
  }

  boolean retriable() {
    return code == NOT_LEADER || code == 12 || code == 15 || code == 18 || code == 19;
  }
}
