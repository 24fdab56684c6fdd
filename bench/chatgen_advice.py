"""Questions about what the assistant said, for `bench.chatgen`: a sentence of the assistant's
answers (`bench.chatgen_topics`) and questions a user asks about it weeks later, in other words
("What was your trick for keeping herbs fresh?"). The evidence is every assistant turn that
said the sentence. Written for this benchmark."""

from __future__ import annotations

ADVICE_EN: dict[str, tuple[str, ...]] = {
    "Fresh herbs last longer if you keep them in a glass of water in the fridge.": (
        "What was your trick for keeping fresh herbs from wilting?",
        "How did you say I should store herbs so they last?",
    ),
    "Label containers in the freezer with the date, otherwise everything looks the same after a month.": (
        "What did you tell me to write on the boxes I freeze?",
    ),
    "One evening a week can be a fridge clear-out night, where you cook whatever needs to be used up.": (
        "What was your idea for using up leftovers once a week?",
    ),
    "Large yearly costs, like car insurance, are easier to handle if you save a twelfth every month.": (
        "How did you suggest I deal with annual bills like car insurance?",
    ),
    "Cash for groceries can help if you tend to overspend at the supermarket.": (
        "What did you recommend so I don't spend too much on food shopping?",
    ),
    "Compare your electricity and phone contracts once a year; switching often saves more than you expect.": (
        "How often did you say I should check my energy and mobile contracts?",
    ),
    "Increase the load slowly, by about five to ten percent per week at most.": (
        "By how much per week did you say I can make my workouts heavier?",
    ),
    "You can train at home with a resistance band and a sturdy chair before buying any equipment.": (
        "What did you say I need to work out at home without buying gear?",
    ),
    "If you are upset, save the draft and send it the next morning.": (
        "What did you advise me to do with a message I write while angry?",
    ),
    "When there is no reply within a week, a short and friendly reminder is perfectly acceptable.": (
        "What did you say I should do if nobody answers my mail for a week?",
    ),
    "Keep the bedroom cool, dark and quiet; a temperature around eighteen degrees works for most people.": (
        "What room temperature did you recommend for sleeping?",
    ),
    "If you can't sleep after twenty minutes, get up and do something calm until you feel tired.": (
        "What did you tell me to do when I lie awake for a long time?",
    ),
    "Naps longer than half an hour can make the night worse.": (
        "How long did you say a nap can be before it ruins the night?",
    ),
    "The top of the screen should be at about eye level, an arm's length away from you.": (
        "How high and how far away did you say my monitor should be?",
    ),
    "A footrest helps if your feet do not rest flat on the floor when the chair is at the right height.": (
        "What did you suggest if my feet don't reach the ground at my desk?",
    ),
    "A weekly review on Friday afternoon helps you plan the next week calmly.": (
        "Which day did you suggest for looking back on my week?",
    ),
    "Meetings without an agenda can often be replaced by a short message.": (
        "What did you say about meetings that have no agenda?",
    ),
    "Mint spreads quickly, so give it a pot of its own.": ("Which herb did you say should get its own container?",),
    "Strawberries grow well in hanging baskets and are safe from snails up there.": (
        "What fruit did you suggest growing in hanging baskets?",
    ),
    "Chilli plants like warmth and can even overwinter indoors on a bright windowsill.": (
        "Which plant did you say can spend the winter inside?",
    ),
}

ADVICE_DE: dict[str, tuple[str, ...]] = {
    "Frische Kräuter halten länger, wenn sie in einem Glas Wasser im Kühlschrank stehen.": (
        "Was war dein Trick, damit frische Kräuter nicht welken?",
        "Wie sollte ich Kräuter laut dir aufbewahren, damit sie länger halten?",
    ),
    "Beschriften Sie Dosen im Gefrierfach mit dem Datum, sonst sieht nach einem Monat alles gleich aus.": (
        "Was sollte ich laut dir auf die Behälter schreiben, die ich einfriere?",
    ),
    "Ein Abend pro Woche kann ein Resteabend sein, an dem Sie kochen, was aufgebraucht werden muss.": (
        "Was war deine Idee, um einmal pro Woche übrig gebliebene Lebensmittel zu verwerten?",
    ),
    "Jährliche Kosten wie die Kfz-Versicherung sind leichter, wenn Sie monatlich ein Zwölftel zurücklegen.": (
        "Wie sollte ich laut dir mit jährlichen Rechnungen wie der Autoversicherung umgehen?",
    ),
    "Bargeld für Lebensmittel hilft, wenn Sie im Supermarkt leicht zu viel ausgeben.": (
        "Was hast du mir empfohlen, damit ich beim Einkaufen nicht zu viel Geld lasse?",
    ),
    "Vergleichen Sie einmal im Jahr Strom- und Handyverträge; ein Wechsel spart oft mehr als gedacht.": (
        "Wie oft sollte ich laut dir meine Energie- und Mobilfunkverträge prüfen?",
    ),
    "Steigern Sie die Last langsam, höchstens um fünf bis zehn Prozent pro Woche.": (
        "Um wie viel pro Woche darf ich mein Training laut dir schwerer machen?",
    ),
    "Zu Hause reichen anfangs ein Widerstandsband und ein stabiler Stuhl, bevor Sie Geräte kaufen.": (
        "Was brauche ich laut dir, um daheim ohne gekaufte Ausrüstung zu trainieren?",
    ),
    "Wenn Sie verärgert sind, speichern Sie den Entwurf und schicken Sie ihn erst am nächsten Morgen.": (
        "Was hast du mir geraten, wenn ich eine Nachricht im Ärger schreibe?",
    ),
    "Kommt nach einer Woche keine Antwort, ist eine kurze, freundliche Erinnerung völlig in Ordnung.": (
        "Was soll ich laut dir tun, wenn sieben Tage lang niemand auf meine Mail reagiert?",
    ),
    "Halten Sie das Schlafzimmer kühl, dunkel und ruhig; rund achtzehn Grad passen für die meisten.": (
        "Welche Raumtemperatur hast du mir zum Schlafen empfohlen?",
    ),
    "Wenn Sie nach zwanzig Minuten nicht schlafen, stehen Sie auf und tun Sie etwas Ruhiges.": (
        "Was soll ich laut dir machen, wenn ich lange wach im Bett liege?",
    ),
    "Mittagsschlaf von mehr als einer halben Stunde kann die Nacht verschlechtern.": (
        "Wie lange darf ein Nickerchen laut dir dauern, bevor es die Nacht stört?",
    ),
    "Die Oberkante des Bildschirms sollte etwa auf Augenhöhe sein, eine Armlänge von Ihnen entfernt.": (
        "Wie hoch und wie weit weg sollte mein Monitor laut dir stehen?",
    ),
    "Eine Fußstütze hilft, wenn die Füße bei richtiger Stuhlhöhe nicht flach auf dem Boden stehen.": (
        "Was hast du vorgeschlagen, falls meine Füße am Schreibtisch nicht bis zum Boden reichen?",
    ),
    "Ein Wochenrückblick am Freitagnachmittag hilft, die nächste Woche in Ruhe zu planen.": (
        "An welchem Tag sollte ich laut dir auf meine Woche zurückschauen?",
    ),
    "Besprechungen ohne Tagesordnung lassen sich oft durch eine kurze Nachricht ersetzen.": (
        "Was hast du über Meetings ohne Agenda gesagt?",
    ),
    "Minze wuchert schnell, geben Sie ihr also einen eigenen Topf.": (
        "Welches Kraut sollte laut dir ein eigenes Gefäß bekommen?",
    ),
    "Erdbeeren wachsen gut in Hängeampeln und sind dort vor Schnecken sicher.": (
        "Welches Obst sollte ich laut dir in hängenden Körben ziehen?",
    ),
    "Chilipflanzen mögen Wärme und können auf einer hellen Fensterbank sogar überwintern.": (
        "Welche Pflanze kann laut dir den Winter drinnen verbringen?",
    ),
}

ADVICE = {"en": ADVICE_EN, "de": ADVICE_DE}
