package jet.spark;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * One connection to a jet server, plaintext or TLS ({@link JetTls}; spec/protocol.md,
 * "Frame"): requests are sent
 * and answered one at a time, or pipelined ({@link #send}, then {@link #receive} or
 * {@link #frame} for answers in any order, several to a FetchStream).
 */
final class JetWire implements Closeable {
  static final int HELLO = 0;
  static final int METADATA = 1;
  static final int LIST_OFFSETS = 5;
  static final int FETCH = 7;
  static final int FETCH_STREAM = 18;
  static final int CANCEL_FETCH_STREAM = 19;
  /** Most responses one FetchStream may ask for (spec/protocol.md, MAX_FETCH_STREAM_RESPONSES). */
  static final int MAX_STREAM_RESPONSES = 1024;
  static final ObjectMapper JSON = new ObjectMapper();

  final String address;
  private final Socket socket;
  private final DataInputStream in;
  private final DataOutputStream out;
  private int nextId = 1;
  /** The body length of the last frame received. */
  int length;
  /** The api, flags and correlation id of the last frame received. */
  int gotApi;
  int gotFlags;
  int gotId;
  /** The APIs the server lists in its Hello answer (0 to 16 when it lists none). */
  private final java.util.BitSet apis = new java.util.BitSet();

  static final int AUTHENTICATE = 10;

  JetWire(String address, JetOptions opts) throws IOException {
    this.address = address;
    int colon = address.lastIndexOf(':');
    if (colon < 0) {
      throw new IOException("jetstream-jvm: server address " + address + " has no port");
    }
    String host = address.substring(0, colon);
    int port = Integer.parseInt(address.substring(colon + 1));
    Socket plain = new Socket();
    plain.setTcpNoDelay(true);
    plain.setSoTimeout(opts.timeoutMs);
    plain.connect(new InetSocketAddress(host, port), opts.timeoutMs);
    socket = opts.tls ? JetTls.wrap(plain, host, port, opts) : plain;
    in = new DataInputStream(new BufferedInputStream(socket.getInputStream(), 65536));
    out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream(), 8192));
    hello(opts.auth);
  }

  /** Send one request frame; its correlation id. */
  int send(int api, byte[] body) throws IOException {
    int id = nextId++;
    out.writeInt(6 + body.length);
    out.writeByte(api);
    out.writeByte(0);
    out.writeInt(id);
    out.write(body);
    out.flush();
    return id;
  }

  /** The body of the answer to request {@code id} (the next frame). */
  byte[] receive(int api, int id) throws IOException {
    return receive(api, id, null);
  }

  /**
   * The body of the answer to request {@code id} (the next frame), in {@code reuse} when it
   * is large enough (its length is then {@link #length}, the array may be longer).
   */
  byte[] receive(int api, int id, byte[] reuse) throws IOException {
    byte[] body = frame(reuse);
    if (gotApi != api || gotId != id || (gotFlags & 0x01) == 0) {
      throw new IOException(
          "jetstream-jvm: answer api " + gotApi + " id " + gotId + " flags " + gotFlags
              + ", expected api " + api + " id " + id);
    }
    return body;
  }

  /** True if the server implements {@code api} (its Hello answer lists it). */
  boolean serves(int api) {
    return apis.get(api);
  }

  /** True if the last frame received says more answers to its request follow (FetchStream). */
  boolean more() {
    return (gotFlags & 0x04) != 0;
  }

  /**
   * The next frame's body ({@link #length} bytes, in {@code reuse} when it is large
   * enough); its api, flags and id in {@link #gotApi}, {@link #gotFlags}, {@link #gotId}.
   * An error frame is thrown as a {@link JetServerError}.
   */
  byte[] frame(byte[] reuse) throws IOException {
    return frame(reuse, 0);
  }

  /**
   * {@link #frame(byte[])}, a new buffer (when {@code reuse} is too small) of at least
   * {@code atLeast} bytes, so that a buffer kept for later answers is not replaced by one a
   * little larger at the next one.
   */
  byte[] frame(byte[] reuse, int atLeast) throws IOException {
    int size = in.readInt();
    if (size < 6 || size > 128 * 1024 * 1024) {
      throw new IOException("jetstream-jvm: bad frame length " + size + " from " + address);
    }
    gotApi = in.readUnsignedByte();
    gotFlags = in.readUnsignedByte();
    gotId = in.readInt();
    length = size - 6;
    byte[] body =
        reuse != null && reuse.length >= length ? reuse : new byte[Math.max(length, atLeast)];
    in.readFully(body, 0, length);
    if ((gotFlags & 0x02) != 0) {
      JsonNode err = JSON.readTree(body, 0, length);
      throw new JetServerError(
          err.path("code").asInt(1),
          err.path("name").asText(""),
          err.path("message").asText(""),
          err.path("details"));
    }
    return body;
  }

  byte[] call(int api, byte[] body) throws IOException {
    return receive(api, send(api, body));
  }

  JsonNode callJson(int api, Object request) throws IOException {
    return JSON.readTree(call(api, JSON.writeValueAsBytes(request)));
  }

  /**
   * The answers to requests {@code ids} (sent on this connection, all of api {@code api}),
   * in the order of {@code ids}, whatever order they come in.
   */
  byte[][] receiveAll(int api, int[] ids) throws IOException {
    java.util.Map<Integer, Integer> where = new java.util.HashMap<>();
    for (int i = 0; i < ids.length; i++) {
      where.put(ids[i], i);
    }
    byte[][] out = new byte[ids.length][];
    for (int n = 0; n < ids.length; n++) {
      byte[] body = frame(null);
      Integer at = where.get(gotId);
      if (gotApi != api || at == null || out[at] != null || (gotFlags & 0x01) == 0) {
        throw new IOException("jetstream-jvm: unexpected answer api " + gotApi + " id " + gotId
            + " flags " + gotFlags + " from " + address);
      }
      out[at] = body;
    }
    return out;
  }

  /** A Fetch request body (spec/protocol.md, "7 Fetch"), replica_id -1. */
  static byte[] fetchBody(String stream, int partition, long offset, int maxBytes) {
    byte[] name = stream.getBytes(StandardCharsets.UTF_8);
    java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(2 + name.length + 4 + 8 + 4 + 4 + 4);
    b.putShort((short) name.length).put(name).putInt(partition).putLong(offset);
    b.putInt(maxBytes).putInt(0).putInt(-1);
    return b.array();
  }

  /** A FetchStream request body (spec/protocol.md, "18 FetchStream"). */
  static byte[] fetchStreamBody(
      String stream, int partition, long offset, int maxBytes, int maxWaitMs, int responses) {
    byte[] name = stream.getBytes(StandardCharsets.UTF_8);
    java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(2 + name.length + 4 + 8 + 4 + 4 + 4);
    b.putShort((short) name.length).put(name).putInt(partition).putLong(offset);
    b.putInt(maxBytes).putInt(maxWaitMs).putInt(responses);
    return b.array();
  }

  /** A CancelFetchStream request body naming FetchStream request {@code id}. */
  static byte[] cancelBody(int id) {
    return java.nio.ByteBuffer.allocate(4).putInt(id).array();
  }

  @Override
  public void close() throws IOException {
    socket.close();
  }

  /** Hello (protocol 1): the first request on a connection. */
  private void hello(java.util.Map<String, String> auth) throws IOException {
    java.util.Map<String, Object> req = new java.util.LinkedHashMap<>();
    req.put("protocol", 1);
    req.put("client", "jetspark-jvm/0.1");
    JsonNode answer = callJson(HELLO, req);
    JsonNode listed = answer.get("apis");
    if (listed == null || !listed.isArray()) {
      apis.set(0, 17);
    } else {
      for (JsonNode api : listed) {
        apis.set(api.asInt());
      }
    }
    if (!answer.path("auth_required").asBoolean(false) || answer.hasNonNull("identity")) {
      return;
    }
    if (auth == null) {
      throw new JetServerError(17, "UNAUTHENTICATED",
          "the server requires authentication: give option token, or user and password",
          JSON.createObjectNode());
    }
    callJson(AUTHENTICATE, auth); // refused: an UNAUTHENTICATED error frame, thrown
  }
}
