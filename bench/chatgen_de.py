"""German templates of `bench.chatgen`: the user's facts, the topics of the sessions, the
assistant's sentences. Written for this benchmark; questions use other words than the facts."""

from __future__ import annotations

from bench.chatgen import FactKind, Pack, rows
from bench.chatgen_topics import TOPICS_DE as TOPICS

_RELATIVES = [
    {"rel": "Schwester", "my": "meine", "name": "Lena", "pron": "sie"},
    {"rel": "Bruder", "my": "mein", "name": "Tobias", "pron": "er"},
    {"rel": "Schwester", "my": "meine", "name": "Miriam", "pron": "sie"},
    {"rel": "Bruder", "my": "mein", "name": "Jonas", "pron": "er"},
    {"rel": "Schwester", "my": "meine", "name": "Aylin", "pron": "sie"},
    {"rel": "Bruder", "my": "mein", "name": "Felix", "pron": "er"},
]
_CITIES = ["Leipzig", "Graz", "Freiburg", "Kopenhagen", "Bremen", "Zürich", "Rostock", "Salzburg"]

FACTS = [
    FactKind(
        key="relative_city",
        check=["Wohnt {your} {rel} noch in {city}?", "Lebt {your} {rel} immer noch in {city}?"],
        correct=["Nein, {pron} ist nach {city} gezogen.", "Nicht mehr, jetzt {city}."],
        clarify=[
            "In welcher Stadt wohnt {your} {rel} gerade?",
            "Wo lebt {your} {rel} inzwischen, damit ich Ihnen eine Route vorschlagen kann?",
        ],
        reply=["In {city}, seit dem Frühjahr.", "{city}. {name} gefällt es dort sehr."],
        topics=("week", "email"),
        requests=[
            "Ich möchte {name} nächsten Monat überraschend besuchen. Wie plane ich die Reise?",
            "Was könnte ich {name} zur neuen Wohnung schicken?",
        ],
        asked=[
            "Was schenke ich {name} zum Einzug, jetzt wo {my} {rel} nach {city} gezogen ist?",
            "Was kann man in {city} unternehmen, wo {my} {rel} {name} jetzt wohnt?",
        ],
        asked_update=[
            "Wie besuche ich {name} günstig, jetzt wo {my} {rel} wieder umgezogen ist und in {city} wohnt?",
            "Wie bleiben wir in Kontakt, wo {my} {rel} {name} inzwischen in {city} lebt?",
        ],
        values=[{**r, "city": c} for r in _RELATIVES for c in _CITIES],
        say=[
            "{my} {rel} {name} ist gerade nach {city} gezogen.",
            "{name}, {my} {rel}, wohnt seit dem Frühjahr in {city}.",
            "{my} {rel} {name} hat endlich eine Wohnung in {city} gefunden.",
        ],
        referred=[
            "{my} {rel} {name} hat mir Fotos der neuen Wohnung geschickt. {Pron} wohnt seit dem Frühjahr in {city}.",
            "{name} hat gestern angerufen, {my} {rel} hat Neuigkeiten. {Pron} ist gerade nach {city} gezogen.",
        ],
        update=[
            "{my} {rel} {name} ist schon wieder umgezogen, {pron} wohnt jetzt in {city}.",
            "{name} hat die Koffer gepackt, {my} {rel} lebt inzwischen in {city}.",
        ],
        changes=["city"],
        ask=[
            "Wo wohnt {my} {rel} zurzeit?",
            "An welche Stadt soll ich die Geburtstagskarte für {name} schicken?",
            "In welchem Ort ist {my} {rel} im Moment zu Hause?",
        ],
        about="die Stadt, in der {my} {rel} lebt",
        answer="{city}",
        mention=["Ich habe gestern lange mit {name} telefoniert.", "{name} hat mir wieder Fotos geschickt."],
        echo=["Schön, dass Sie mit {name} in Kontakt bleiben.", "Ich hoffe, es geht {name} gut."],
    ),
    FactKind(
        key="employer",
        check=["Arbeiten Sie noch als {job} {at}?", "Sind Sie noch {at} beschäftigt?"],
        correct=["Nein, ich bin jetzt {job} {at}.", "Nicht mehr, inzwischen {job} {at}."],
        clarify=["Was machen Sie beruflich, und wo?", "Wo arbeiten Sie im Moment, und als was?"],
        reply=["Als {job} {at}, seit zwei Wochen.", "{job}, {at}."],
        topics=("office", "email"),
        requests=[
            "Kannst du mir einen kurzen Text für mein Profil in einem Karrierenetzwerk schreiben?",
            "Wie stelle ich mich bei einem Netzwerktreffen nächste Woche vor?",
        ],
        asked=[
            "Wie frage ich als {job} {at} nach meinem ersten Mitarbeitergespräch?",
            "Wie stelle ich mich dem Team vor, wo ich doch gerade als {job} {at} angefangen habe?",
        ],
        asked_update=[
            "Wie passe ich meinen Lebenslauf an, jetzt wo ich die Stelle gewechselt habe und {job} {at} bin?",
            "Was sage ich meinen alten Kunden, seit ich als {job} {at} arbeite?",
        ],
        values=[
            {"job": "Krankenpflegerin", "at": "beim Klinikum Nord"},
            {"job": "Datenanalyst", "at": "bei der Hansa Versicherung"},
            {"job": "Lehrerin", "at": "an der Lindenschule"},
            {"job": "Softwareentwickler", "at": "bei Nordlicht Software"},
            {"job": "Steuerberaterin", "at": "bei Becker & Partner"},
            {"job": "Produktdesigner", "at": "bei Formwerk"},
        ],
        say=[
            "ich habe vor zwei Wochen als {job} {at} angefangen.",
            "ich arbeite jetzt als {job} {at}.",
            "seit ich als {job} {at} bin, sind meine Tage lang.",
        ],
        update=[
            "ich habe die Stelle gewechselt, ich bin jetzt {job} {at}.",
            "ich habe gekündigt; seit Montag arbeite ich als {job} {at}.",
        ],
        changes=["job", "at"],
        ask=["Für wen arbeite ich?", "Was ist mein aktueller Beruf?", "Welche Firma zahlt mir im Moment das Gehalt?"],
        about="mein Arbeitgeber",
        answer="{job} {at}",
        mention=["Die Arbeit war diese Woche anstrengend.", "Mein Chef wollte schon wieder, dass ich länger bleibe."],
        echo=["Herzlichen Glückwunsch zur neuen Aufgabe!", "Ein neuer Arbeitsplatz braucht immer etwas Eingewöhnung."],
    ),
    FactKind(
        key="pet",
        clarify=["Haben Sie Haustiere, auf die ich achten sollte?", "Lebt bei Ihnen ein Tier im Haushalt?"],
        reply=["Ja, {animal} aus dem Tierheim, {pet}.", "{pet}, unser Neuzugang."],
        topics=("sleep", "week"),
        requests=[
            "Wir fahren eine Woche weg. Was müssen wir zu Hause vorher organisieren?",
            "Welche Zimmerpflanzen sind in unserer Wohnung unbedenklich?",
        ],
        asked=[
            "Wir haben {animal} aus dem Tierheim geholt und {pet} genannt, welches Spielzeug ist sicher?",
            "Wie bringen wir {pet}, unser neues Haustier, dazu, nachts durchzuschlafen?",
        ],
        values=[
            {"animal": "einen Hund", "pet": "Bruno"},
            {"animal": "eine Katze", "pet": "Mimi"},
            {"animal": "ein Kaninchen", "pet": "Flocke"},
            {"animal": "einen Hund", "pet": "Paule"},
            {"animal": "eine Katze", "pet": "Luna"},
            {"animal": "einen Wellensittich", "pet": "Pieps"},
        ],
        say=[
            "wir haben {animal} aus dem Tierheim geholt und {pet} genannt.",
            "{pet}, unser neues Haustier, hält mich nachts wach.",
        ],
        referred=[
            "seit letztem Monat haben wir ein Haustier aus dem Tierheim. Es heißt {pet} und hält mich nachts wach.",
            "bei uns ist im Frühjahr ein Tier eingezogen. Es hört auf den Namen {pet}.",
        ],
        ask=["Wie heißt das Tier, das bei uns eingezogen ist?", "Welchen Namen hat unser neuer Mitbewohner mit Fell?"],
        about="der Name unseres Haustiers",
        answer="{pet}",
        mention=["Heute Morgen ist schon wieder eine Pflanze umgefallen.", "Ich muss dringend Futter kaufen."],
        echo=["Ein Tier verändert den Alltag ganz schön.", "Ich hoffe, der Neuzugang lebt sich gut ein."],
    ),
    FactKind(
        key="allergy",
        clarify=[
            "Gibt es Lebensmittel, die Sie nicht vertragen?",
            "Gibt es Allergien oder Zutaten, die ich weglassen soll?",
        ],
        reply=["{food}, davon bekomme ich Ausschlag.", "Nur {food}."],
        topics=("meals",),
        requests=[
            "Was könnte ich heute Abend kochen?",
            "Was kann ich am Wochenende zum Grillabend bei Freunden mitbringen?",
        ],
        asked=[
            "Welche Snacks kann ich ins Büro mitnehmen, wenn ich gegen {food} allergisch bin?",
            "Hast du Ideen für Desserts ohne {food}, da ich heftig darauf reagiere?",
        ],
        values=[{"food": f} for f in ["Erdnüsse", "Meeresfrüchte", "Sesam", "Kiwis", "Haselnüsse", "Sellerie"]],
        say=[
            "ich bin allergisch gegen {food}, da muss ich aufpassen.",
            "ich vertrage nichts mit {food}, ich reagiere heftig darauf.",
        ],
        ask=[
            "Welche Zutat muss ich meiden?",
            "Von welchem Lebensmittel werde ich krank?",
            "Wogegen bin ich allergisch?",
        ],
        about="die Zutat, die ich nicht essen darf",
        answer="{food}",
        mention=["Im Supermarkt lese ich jedes Etikett.", "Essen gehen ist für mich immer etwas stressig."],
        echo=["Ich berücksichtige Ihre Unverträglichkeit.", "Prüfen Sie die Zutatenliste natürlich trotzdem."],
    ),
    FactKind(
        key="car",
        check=["Fahren Sie noch {car}?", "Haben Sie noch {car}?"],
        correct=["Nein, jetzt {car}.", "Verkauft, ich habe {car}."],
        clarify=["Welches Auto fahren Sie?", "Was fahren Sie für ein Auto?"],
        reply=["{car}.", "{car}, inzwischen abbezahlt."],
        topics=("budget",),
        requests=[
            "Was sollte ich vor einer langen Autofahrt im Sommer prüfen?",
            "Wie kann ich meine monatlichen Fahrtkosten senken?",
        ],
        asked=[
            "Ich fahre {car}, wie oft muss der zur Inspektion?",
            "Ich habe {car}, taugt der für eine lange Urlaubsfahrt?",
        ],
        asked_update=[
            "Ich habe das alte Auto verkauft und mir {car} gekauft, welche Versicherung passt jetzt?",
            "Welches Zubehör lohnt sich, jetzt wo ich {car} statt des alten Wagens fahre?",
        ],
        values=rows(
            "einen roten Opel Corsa; einen blauen VW Golf; einen grauen Skoda Fabia; einen weißen BMW i3;"
            " einen grünen Fiat 500; einen schwarzen Audi A4",
            "car",
        ),
        say=["ich fahre {car}.", "ich habe {car}, endlich abbezahlt."],
        referred=[
            "ich habe mir letztes Jahr endlich ein eigenes Auto gekauft. Es war ein Schnäppchen, ich fahre {car}.",
            "mein Auto stammt vom Nachbarn. Er hat mir {car} günstig überlassen.",
        ],
        update=[
            "ich habe mein altes Auto verkauft und mir {car} gekauft.",
            "ich fahre jetzt {car}, der alte Wagen ist weg.",
        ],
        changes=["car"],
        ask=["Welches Fahrzeug steht in meiner Einfahrt?", "Mit welchem Modell bin ich unterwegs?"],
        about="das Auto, das ich besitze",
        answer="{car}",
        mention=["Das Auto braucht vor dem Winter neue Reifen.", "Parken in der Nähe vom Büro ist ein Albtraum."],
        echo=["Gut, das Auto gleich mit einzuplanen.", "Mit dem Auto sind Sie natürlich flexibler."],
    ),
    FactKind(
        key="instrument",
        clarify=["Spielen Sie ein Instrument?", "Machen Sie selbst Musik?"],
        reply=["Ja, {instrument}, seit einem Jahr.", "{instrument}, jeden Abend."],
        topics=("week", "sleep"),
        requests=[
            "Wie halte ich den Lärm für die Nachbarn gering, wenn ich abends übe?",
            "Wie teile ich mir diesen Monat meine Übungszeit ein?",
        ],
        asked=[
            "Wie kann ich abends leise {instrument} üben, ohne die Nachbarn zu stören?",
            "Welche Stücke eignen sich nach einem Jahr {instrument}-Unterricht?",
        ],
        values=[{"instrument": i} for i in ["Cello", "Klavier", "Geige", "Saxofon", "Ukulele", "Schlagzeug"]],
        say=["ich lerne seit einem Jahr {instrument} bei einer Lehrerin.", "ich übe jeden Abend {instrument}."],
        ask=["Welches Instrument lerne ich?", "Was spiele ich, wenn ich von der Arbeit heimkomme?"],
        about="das Instrument, das ich lerne",
        answer="{instrument}",
        mention=["Meine Musiklehrerin sagt, ich mache Fortschritte.", "Meine Nachbarn sind sehr geduldig mit mir."],
        echo=["Musik ist ein wunderbarer Ausgleich.", "Regelmäßiges Üben zahlt sich aus."],
    ),
    FactKind(
        key="partner_birthday",
        clarify=[
            "Wann hat {your} {partner} Geburtstag?",
            "An welchem Datum hat {your} {partner} Geburtstag, damit wir planen können?",
        ],
        reply=["Am {date}, {name} wird vierzig.", "Am {date}, und ich habe noch kein Geschenk."],
        topics=("budget", "week"),
        requests=[
            "Welche Termine sollte ich dieses Jahr für Geschenke im Blick haben?",
            "Kannst du mir helfen, eine Überraschungsparty für {name} zu planen?",
        ],
        asked=[
            "Was soll ich {name} zum Geburtstag am {date} schenken?",
            "Kannst du mir helfen, eine Überraschung für {name}s Geburtstag am {date} zu planen?",
        ],
        values=rows(
            "Frau|meine|Anna|14. März; Mann|mein|Markus|2. Juli; Freundin|meine|Julia|23. September;"
            " Freund|mein|Ben|9. November; Partnerin|meine|Sabine|30. Januar",
            *("partner", "my", "name", "date"),
        ),
        say=[
            "{my} {partner} {name} hat am {date} Geburtstag.",
            "{name} wird am {date} vierzig, und ich habe noch kein Geschenk.",
        ],
        ask=["An welchem Tag soll ich die Feier für {name} planen?", "Wann wird {my} {partner} ein Jahr älter?"],
        about="das Geburtsdatum von {name}",
        answer="{date}",
        mention=["{name} und ich waren am Fluss spazieren.", "{my} {partner} arbeitet diesen Monat nachts."],
        echo=["Das ist eine schöne Idee für {name}.", "Darüber freut sich {name} bestimmt."],
    ),
    FactKind(
        key="trip",
        check=["Steht die Reise nach {place} im {month} noch?", "Fliegen Sie noch im {month} nach {place}?"],
        correct=["Nein, umgeplant: {place} im {month}.", "Abgesagt, stattdessen {place} im {month}."],
        clarify=["Steht bei Ihnen eine Reise an?", "Wohin geht es denn, und wann?"],
        reply=["Ja, im {month} nach {place}, schon gebucht.", "{place}, im {month}."],
        topics=("budget", "week"),
        requests=[
            "Welche Impfungen oder Dokumente brauchen wir für unseren Urlaub?",
            "Was sollten wir für die nächste Reise einpacken?",
        ],
        asked=[
            "Was sollten wir für die Reise nach {place} im {month} einpacken?",
            "Welche Impfungen brauchen wir, bevor wir im {month} nach {place} fliegen?",
        ],
        asked_update=[
            "Wir fahren jetzt doch im {month} nach {place}, was sollten wir zuerst buchen?",
            "Lohnt sich eine Reiseversicherung, jetzt wo {place} im {month} der neue Plan ist?",
        ],
        values=rows(
            "Island|Juni; Lissabon|April; Japan|Oktober; Kreta|August; Norwegen|Juli; Marokko|März", "place", "month"
        ),
        say=["wir fliegen im {month} nach {place}.", "wir haben für {month} einen Urlaub in {place} gebucht."],
        update=[
            "wir haben umgeplant, wir fahren stattdessen im {month} nach {place}.",
            "die alte Reise ist storniert; {place} im {month} ist der neue Plan.",
        ],
        changes=["place", "month"],
        ask=["Wohin geht unser Urlaub?", "Was ist das Ziel unserer nächsten Reise?"],
        about="wohin wir in den Urlaub fahren",
        answer="{place} im {month}",
        mention=["Ich brauche ehrlich gesagt eine Pause.", "Ich lese seit Tagen Reiseblogs."],
        echo=["Ein Urlaub wird Ihnen guttun.", "Schön, etwas zu haben, auf das man sich freut."],
    ),
    FactKind(
        key="workout_day",
        check=["Ist {sport} noch am {day}?", "Gehen Sie noch am {day} zum {sport}?"],
        correct=["Nein, jetzt am {day}.", "Verlegt, {day}s früh."],
        clarify=["An welchem Tag machen Sie normalerweise Sport?", "Haben Sie einen festen Termin fürs Training?"],
        reply=["{day}s früh, {sport}.", "Am {day}morgen, {sport}, nie ausgelassen."],
        topics=("training", "week"),
        requests=[
            "An welchem Morgen passt mir ein frühes Meeting am besten?",
            "Wie plane ich meine Mahlzeiten rund um mein Training?",
        ],
        asked=[
            "Was sollte ich vor dem {sport} am {day}morgen essen?",
            "Wie erhole ich mich am besten nach dem {sport}, zu dem ich jeden {day} früh gehe?",
        ],
        asked_update=[
            "Wie plane ich den Rest des Tages, jetzt wo ich das {sport} auf den {day} verlegt habe?",
            "Welcher Abend eignet sich zum Ausruhen, wenn {sport} ab jetzt am {day} ist?",
        ],
        values=[
            {"sport": s, "day": d}
            for s in ["Schwimmen", "Klettern", "Yoga"]
            for d in ["Montag", "Mittwoch", "Samstag", "Donnerstag"]
        ],
        say=[
            "ich gehe jeden {day} früh zum {sport}.",
            "der {day}morgen gehört dem {sport}, den lasse ich nie ausfallen.",
        ],
        update=[
            "ich habe das {sport} auf den {day} verlegt.",
            "ab jetzt ist {sport} am {day}, der alte Termin hat nicht gepasst.",
        ],
        changes=["day"],
        ask=[
            "Welchen Wochentag halte ich mir fürs {sport} frei?",
            "Wann in der Woche mache ich meinen regelmäßigen Sport?",
        ],
        about="der Tag, an dem ich zum {sport} gehe",
        answer="{day}",
        mention=["Meine Schultern sind vom Training ganz verspannt.", "Ich habe mir eine neue Sporttasche gekauft."],
        echo=["Bewegung hilft dabei sicher.", "Planen Sie Ihren Sport fest mit ein."],
    ),
    FactKind(
        key="dentist",
        check=["Ist Ihr Zahnarzttermin noch am {date}?", "Bleibt es beim Zahnarzt am {date}?"],
        correct=["Nein, jetzt am {date}.", "Verschoben auf den {date}."],
        clarify=[
            "Wann ist Ihr nächster Zahnarzttermin?",
            "Haben Sie demnächst Termine, um die wir herumplanen sollten?",
        ],
        reply=["Am {date}, endlich gebucht.", "Am {date}, beim Zahnarzt."],
        topics=("week",),
        requests=[
            "Gibt es Termine, um die ich meine Woche planen sollte?",
            "Was steht bei mir demnächst an, das ich nicht vergessen darf?",
        ],
        asked=[
            "Was sollte ich bei meinem Zahnarzttermin am {date} fragen?",
            "Darf ich vor dem Zahnarzt am {date} normal essen?",
        ],
        asked_update=[
            "Die Praxis hat meinen Termin auf den {date} verschoben, soll ich mir den ganzen Tag freinehmen?",
            "Brauche ich eine neue Überweisung, wo ich den Zahnarzttermin auf den {date} verlegen musste?",
        ],
        values=[{"date": d} for d in ["12. Februar", "3. März", "18. April", "7. Mai", "21. Juni", "5. August"]],
        say=["mein Zahnarzttermin ist am {date}.", "ich habe endlich einen Termin beim Zahnarzt, am {date}."],
        update=[
            "die Zahnarztpraxis hat meinen Termin auf den {date} verschoben.",
            "ich musste den Zahnarzttermin verlegen, er ist jetzt am {date}.",
        ],
        changes=["date"],
        ask=[
            "Wann muss ich meine Zähne kontrollieren lassen?",
            "An welchem Datum ist meine nächste Kontrolle in der Praxis?",
        ],
        about="der Termin meiner Zahnkontrolle",
        answer="{date}",
        mention=["Einer meiner Backenzähne ist empfindlich.", "Ich hasse Wartezimmer."],
        echo=["Gut, dass Sie auf Ihre Gesundheit achten.", "Arzttermine sollte man wirklich einhalten."],
    ),
    FactKind(
        key="language",
        clarify=["Pauken Sie gerade Vokabeln, und wenn ja, in welcher Sprache?", "Lernen Sie gerade eine Sprache?"],
        reply=["{lang}, jeden Tag mit einer App.", "Ja, {lang}, im Abendkurs."],
        topics=("week",),
        requests=[
            "Kannst du mir Podcasts für den Arbeitsweg empfehlen?",
            "Welche Filme könnten mir beim Lernen helfen?",
        ],
        asked=[
            "Welche Podcasts helfen mir beim {lang}, das ich jeden Tag mit einer App lerne?",
            "Wie hole ich mehr aus meinem Abendkurs in {lang} heraus?",
        ],
        values=[
            {"lang": x}
            for x in ["Portugiesisch", "Japanisch", "Italienisch", "Koreanisch", "Niederländisch", "Griechisch"]
        ],
        say=["ich lerne jeden Tag mit einer App {lang}.", "ich habe mich für einen Abendkurs in {lang} angemeldet."],
        ask=["Welche Fremdsprache lerne ich gerade?", "Welche Sprache übe ich in letzter Zeit?"],
        about="die Sprache, die ich lerne",
        answer="{lang}",
        mention=["Meine Vokabel-App nervt mich ständig.", "Die Grammatik ist für mich das Schwerste."],
        echo=[
            "Eine Sprache zu lernen braucht Geduld.",
            "Kurze tägliche Einheiten wirken beim Sprachenlernen am besten.",
        ],
    ),
    FactKind(
        key="author",
        clarify=["Wer ist Ihr Lieblingsautor?", "Welche Autorin oder welchen Autor lesen Sie am liebsten?"],
        reply=["{author}, ich habe alles gelesen.", "{author}, ganz klar."],
        topics=("sleep",),
        requests=[
            "Kannst du mir einen Roman für den nächsten Urlaub empfehlen?",
            "Welches Buch sollte ich als Nächstes kaufen?",
        ],
        asked=[
            "Ich liebe die Bücher von {author} und habe alles gelesen, was soll ich als Nächstes lesen?",
            "Wenn mir niemand so gut gefällt wie {author}, welche Bücher sollte ich als Nächstes lesen?",
        ],
        values=[{"author": a} for a in ["Juli Zeh", "Daniel Kehlmann", "Christa Wolf", "Haruki Murakami"]],
        say=["die Bücher von {author} liebe ich, ich habe alles gelesen.", "niemand schreibt wie {author}, finde ich."],
        ask=["Wessen Romane mag ich am liebsten?", "Welche schreibende Person bewundere ich am meisten?"],
        about="wer mein liebstes Buch geschrieben hat",
        answer="{author}",
        mention=["Ich habe im Zug schon wieder ein Buch beendet.", "Meine Leseliste wird viel zu lang."],
        echo=["Lesen vor dem Schlafen ist eine gute Gewohnheit.", "Bücher sind ein guter Weg, um abzuschalten."],
    ),
]

PACK = Pack(
    language="de",
    user="Nutzer",
    assistant="Assistent",
    facts=FACTS,
    topics=TOPICS,
    leads=["Übrigens:", "Nur zur Info:", "Ganz anderes Thema:", "Kurzes Update:", "Ach ja,"],
    follow_ups=[
        ("Danke, das hilft. Kannst du es etwas kürzer fassen?", "Gern, hier ist eine kürzere Fassung."),
        (
            "Super. Was sind die häufigsten Fehler dabei?",
            "Gute Frage; das sind die Punkte, bei denen es am häufigsten hakt.",
        ),
        ("Kannst du daraus eine einfache Checkliste machen?", "Natürlich, hier sind die Punkte als Checkliste."),
        (
            "Was würdest du ändern, wenn ich nur halb so viel Zeit hätte?",
            "Dann würde ich mich auf das Wesentliche beschränken.",
        ),
        ("Klingt gut. Gibt es etwas, das ich vermeiden sollte?", "Ja, ein paar Dinge sollten Sie vermeiden."),
        ("Kannst du den zweiten Punkt genauer erklären?", "Gern, ich gehe genauer darauf ein."),
    ],
    intros=[
        "Gern, hier ist ein Plan, der gut für Sie funktionieren sollte.",
        "Da helfe ich gern; gehen wir es Schritt für Schritt durch.",
        "Gute Frage, und ein paar einfache Dinge machen einen großen Unterschied.",
        "Klar, so würde ich vorgehen.",
    ],
    outros=[
        "Sagen Sie Bescheid, wenn ich etwas anpassen soll.",
        "Ich hoffe, das hilft, und erzählen Sie mir, wie es läuft.",
        "Wenn Sie möchten, gehe ich auf jeden Punkt noch genauer ein.",
        "Melden Sie sich gern mit weiteren Fragen.",
        "Soll ich daraus eine kurze Checkliste machen?",
        "Möchten Sie, dass ich auf einen der Punkte genauer eingehe?",
        "Passt das so für Sie, oder soll ich etwas ändern?",
    ],
    multi_hop=[
        "Erinner mich an zwei Dinge: {a} und {b}.",
        "Für ein Formular brauche ich zwei Angaben: {a} und {b}.",
        "Zwei Fragen auf einmal: {a}, und {b}?",
        "Ich habe zwei Dinge vergessen: {a} und {b}. Weißt du das noch?",
    ],
)
