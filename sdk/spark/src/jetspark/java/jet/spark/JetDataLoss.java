package jet.spark;

/** Records the query was to read are gone (jetspark.errors.DataLossError's counterpart). */
final class JetDataLoss extends IllegalStateException {
  private static final long serialVersionUID = 1L;

  JetDataLoss(String where, String message) {
    super("jetstream " + where + ": data loss: " + message
        + " (option failOnDataLoss=false skips such gaps)");
  }
}
