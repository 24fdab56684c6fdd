"""English templates of `bench.chatgen`: the user's facts, the topics of the sessions, the
assistant's sentences. Written for this benchmark; questions use other words than the facts."""

from __future__ import annotations

from bench.chatgen import FactKind, Pack, rows
from bench.chatgen_topics import TOPICS_EN as TOPICS

_RELATIVES = [
    {"rel": "sister", "name": "Lena", "pron": "she", "city": "Porto"},
    {"rel": "brother", "name": "Tom", "pron": "he", "city": "Leeds"},
    {"rel": "sister", "name": "Maya", "pron": "she", "city": "Vancouver"},
    {"rel": "brother", "name": "Jonah", "pron": "he", "city": "Melbourne"},
    {"rel": "sister", "name": "Priya", "pron": "she", "city": "Edinburgh"},
    {"rel": "brother", "name": "Luis", "pron": "he", "city": "Valencia"},
]
_CITIES = ["Porto", "Leeds", "Vancouver", "Melbourne", "Edinburgh", "Valencia", "Kyoto", "Denver"]

FACTS = [
    FactKind(
        key="relative_city",
        check=["Is your {rel} still living in {city}?", "Does your {rel} still live in {city}, or has that changed?"],
        correct=["No, {pron} moved to {city} a while ago.", "Not anymore, {city} now."],
        clarify=[
            "Which city does your {rel} live in at the moment?",
            "Where is your {rel} living now, so I can suggest a route?",
        ],
        reply=["{city}, since the spring.", "In {city}. {name} loves it there."],
        topics=("week", "email"),
        requests=[
            "I'd like to surprise my {rel} with a visit next month. How should I plan the journey?",
            "Which present could I post to my {rel} for a new home?",
        ],
        asked=[
            "What's a good housewarming gift for my {rel} {name}, who just moved to {city}?",
            "What is there to do in {city}, where my {rel} {name} lives now, when I visit?",
        ],
        asked_update=[
            "Now that my {rel} {name} has moved again and lives in {city}, how can I visit on a budget?",
            "Since {name} packed up and my {rel} is in {city} these days, how do we keep in touch?",
        ],
        values=[{**r, "city": c} for r in _RELATIVES for c in _CITIES],
        say=[
            "my {rel} {name} just moved to {city} for a new start.",
            "{name}, my {rel}, has been living in {city} since the spring.",
            "my {rel} {name} finally found a flat in {city}.",
        ],
        referred=[
            "I had a long phone call with my {rel} {name} yesterday. {Pron} just moved to {city} for a new start.",
            "my {rel} {name} sent me photos of the new flat. {Pron} has been living in {city} since the spring.",
        ],
        update=[
            "my {rel} {name} moved again, {pron} lives in {city} now.",
            "{name} packed up and left, so my {rel} is in {city} these days.",
        ],
        changes=["city"],
        ask=[
            "Where does my {rel} live these days?",
            "Which city should I send {name}'s birthday card to?",
            "In what town is my {rel} based at the moment?",
        ],
        about="the city my {rel} lives in",
        answer="{city}",
        mention=["I had a long phone call with my {rel} {name} yesterday.", "{name} sent me photos again."],
        echo=["I hope your {rel} is doing well.", "It's lovely that you and {name} stay in touch."],
    ),
    FactKind(
        key="employer",
        check=["Are you still working as {job} at {company}?", "Is {company} still your employer?"],
        correct=["No, I switched: {job} at {company} now.", "Not anymore, I'm {job} at {company}."],
        clarify=["What do you do for work, and where?", "Where are you working at the moment, and in which role?"],
        reply=["{job} at {company}, two weeks in.", "{job}, at {company}."],
        topics=("office", "email"),
        requests=[
            "Can you help me write a short bio for my profile on a professional network?",
            "How should I introduce myself at a networking event next week?",
        ],
        asked=[
            "How do I ask for my first performance review as {job} at {company}?",
            "How should I introduce myself to the team at {company}, where I just started as {job}?",
        ],
        asked_update=[
            "Now that I've switched jobs and I'm {job} at {company}, how do I update my CV?",
            "Since I left my old position to work as {job} at {company}, what do I tell my old clients?",
        ],
        values=[
            {"job": "a nurse", "company": "St. Mary's Hospital"},
            {"job": "a data analyst", "company": "Brightline Insurance"},
            {"job": "a teacher", "company": "Oakwood Primary School"},
            {"job": "a software developer", "company": "Nimbus Labs"},
            {"job": "an accountant", "company": "Harper & Cole"},
            {"job": "a product designer", "company": "Fernway"},
        ],
        say=[
            "I started a new job as {job} at {company} two weeks ago.",
            "I work as {job} for {company} now.",
            "since I joined {company} as {job}, my days have been long.",
        ],
        update=[
            "I switched jobs, I'm now {job} at {company}.",
            "I left my old position; since Monday I've been working as {job} at {company}.",
        ],
        changes=["job", "company"],
        ask=["Who do I work for?", "What's my current occupation?", "Which company pays my salary at the moment?"],
        about="my employer",
        answer="{job} at {company}",
        mention=["Work was exhausting this week.", "My boss asked me to stay late again."],
        echo=["Congratulations on the new role!", "A change of workplace always takes some getting used to."],
    ),
    FactKind(
        key="pet",
        clarify=["Do you have any pets I should keep in mind?", "Is there an animal in your household?"],
        reply=["Yes, a {animal} called {pet}, from the shelter.", "{pet}, our {animal}."],
        topics=("sleep", "week"),
        requests=[
            "We're going away for a week. What do we need to organise at home before we leave?",
            "Which houseplants are safe to keep in our flat?",
        ],
        asked=[
            "Which toys are safe for the {animal} we adopted from the shelter, {pet}?",
            "How do we get {pet}, our new {animal}, to sleep through the night?",
        ],
        values=[
            {"animal": "dog", "pet": "Biscuit"},
            {"animal": "cat", "pet": "Mochi"},
            {"animal": "rabbit", "pet": "Clover"},
            {"animal": "dog", "pet": "Pepper"},
            {"animal": "cat", "pet": "Juniper"},
            {"animal": "parrot", "pet": "Kiwi"},
        ],
        say=["we adopted a {animal} called {pet} from the shelter.", "our new {animal}, {pet}, keeps me up at night."],
        referred=[
            "we took in a {animal} from the shelter last month. It's called {pet} and it keeps me up at night.",
            "there's a new {animal} in our home since the spring. Its name is {pet}, after a cartoon.",
        ],
        ask=["What's the name of the animal we took in?", "What did we call our new companion at home?"],
        about="the name of our pet",
        answer="{pet}",
        mention=["The {animal} knocked over a plant this morning.", "I need to buy more pet food."],
        echo=["Animals do change a household's routine.", "I hope the little one is settling in."],
    ),
    FactKind(
        key="allergy",
        clarify=["Are there any foods you can't eat?", "Any allergies or ingredients I should leave out?"],
        reply=["{food}, I react badly to them.", "Only {food}."],
        topics=("meals",),
        requests=[
            "Can you suggest a dinner I could cook tonight?",
            "What could I bring to a friend's barbecue this weekend?",
        ],
        asked=[
            "Which snacks can I take to the office, given that I'm allergic to {food}?",
            "Can you suggest desserts without {food}, since I react badly to it?",
        ],
        values=[{"food": f} for f in ["peanuts", "shellfish", "sesame", "kiwi", "hazelnuts", "celery"]],
        say=[
            "I'm allergic to {food}, so I have to be careful.",
            "I can't eat anything with {food}, I react badly to it.",
        ],
        ask=["Which ingredient must I stay away from?", "What food makes me ill?", "What am I allergic to?"],
        about="the ingredient I cannot eat",
        answer="{food}",
        mention=["I read every label in the supermarket.", "Eating out is always a bit stressful for me."],
        echo=["I'll keep your dietary restriction in mind.", "Always double-check the labels, of course."],
    ),
    FactKind(
        key="car",
        check=["Are you still driving the {color} {car}?", "Is the {color} {car} still your car?"],
        correct=["No, I have a {color} {car} now.", "Sold it, it's a {color} {car} these days."],
        clarify=["Which car do you drive?", "What are you driving these days?"],
        reply=["A {color} {car}.", "The {color} {car}, paid off now."],
        topics=("budget",),
        requests=[
            "What should I check before a long drive this summer?",
            "How can I cut my monthly transport costs?",
        ],
        asked=[
            "How often should I take my {color} {car} in for a service?",
            "Is my {color} {car} good enough for a long road trip?",
        ],
        asked_update=[
            "I just traded in my old car for a {color} {car}, so which insurance should I look at?",
            "Which accessories are worth buying now that I drive a {color} {car} instead of my old car?",
        ],
        values=[
            {"color": c, "car": m}
            for c, m in [
                ("red", "Toyota Corolla"),
                ("blue", "Volkswagen Golf"),
                ("grey", "Ford Focus"),
                ("white", "Tesla Model 3"),
                ("green", "Skoda Octavia"),
                ("black", "Honda Civic"),
            ]
        ],
        say=["I drive a {color} {car}.", "my {color} {car} is finally paid off."],
        referred=[
            "I finally bought a car of my own last year. It's a {color} {car}, and it's paid off now.",
            "my car was a bargain from a neighbour. It's a {color} {car} with hardly any miles on it.",
        ],
        update=["I sold my old car and bought a {color} {car}.", "I traded in my car; I have a {color} {car} now."],
        changes=["color", "car"],
        ask=["What vehicle is parked in my driveway?", "Which model do I get around in?"],
        about="the car I own",
        answer="{color} {car}",
        mention=["The car needs new tyres before winter.", "Parking near my office is a nightmare."],
        echo=["Good to plan around the car.", "Driving does give you flexibility."],
    ),
    FactKind(
        key="instrument",
        clarify=["Do you play an instrument?", "Is there any music you make yourself?"],
        reply=["The {instrument}, for a year now.", "{instrument}, every evening."],
        topics=("week", "sleep"),
        requests=[
            "How can I keep the noise down for the neighbours when I practise in the evening?",
            "How should I structure my practice time this month?",
        ],
        asked=[
            "How can I practise the {instrument} quietly in the evenings without annoying anyone?",
            "Which pieces should I try on the {instrument} after a year of lessons?",
        ],
        values=[{"instrument": i} for i in ["cello", "piano", "violin", "saxophone", "ukulele", "drums"]],
        say=["I've been taking {instrument} lessons for a year now.", "I practise the {instrument} every evening."],
        ask=["Which instrument am I learning?", "What do I play when I get home from work?"],
        about="the instrument I study",
        answer="{instrument}",
        mention=["My music teacher says I'm improving.", "My neighbours are very patient with my practice."],
        echo=["Music is a great way to switch off.", "Regular practice pays off."],
    ),
    FactKind(
        key="partner_birthday",
        clarify=[
            "When is your {partner}'s birthday?",
            "Which date is your {partner}'s birthday, so we can plan around it?",
        ],
        reply=["On {date}. {name} turns forty.", "{date}, and I have no gift yet."],
        topics=("budget", "week"),
        requests=[
            "Which dates should I keep in mind for presents this year?",
            "Can you help me plan a surprise party for my {partner}?",
        ],
        asked=[
            "What should I get my {partner} {name} for the birthday on {date}?",
            "Could you help me plan a surprise for {name}, who turns forty on {date}?",
        ],
        values=[
            {"partner": p, "name": n, "date": d}
            for (p, n), d in zip(
                [
                    ("wife", "Anna"),
                    ("husband", "Mark"),
                    ("partner", "Sam"),
                    ("girlfriend", "Julia"),
                    ("boyfriend", "Ben"),
                ],
                ["14 March", "2 July", "23 September", "9 November", "30 January"],
                strict=True,
            )
        ],
        say=["my {partner} {name}'s birthday is on {date}.", "{name} turns forty on {date}, and I still have no gift."],
        ask=["On which day should I plan {name}'s party?", "When does my {partner} celebrate getting older?"],
        about="the date of my {partner}'s birthday",
        answer="{date}",
        mention=["{name} and I went for a walk by the river.", "My {partner} is working nights this month."],
        echo=["That's a lovely thing to do for {name}.", "Your {partner} will appreciate it."],
    ),
    FactKind(
        key="trip",
        check=["Is the trip to {place} in {month} still on?", "Are you still flying to {place} in {month}?"],
        correct=["No, we changed plans: {place} in {month}.", "Cancelled, it's {place} in {month} instead."],
        clarify=["Do you have a trip coming up?", "Where are you travelling to, and when?"],
        reply=["Yes, {place} in {month}, already booked.", "{place}, in {month}."],
        topics=("budget", "week"),
        requests=[
            "Which vaccinations or documents do we need for our holiday?",
            "What should we pack for our next trip?",
        ],
        asked=[
            "What should we pack for our trip to {place} in {month}?",
            "Which vaccinations do we need before we fly to {place} in {month}?",
        ],
        asked_update=[
            "Since we changed our plans and are going to {place} in {month} instead, what should we book first?",
            "Now that {place} in {month} is the new plan, is travel insurance worth it?",
        ],
        values=rows(
            "Iceland|June; Lisbon|April; Japan|October; Crete|August; Norway|July; Morocco|March", "place", "month"
        ),
        say=["we're flying to {place} in {month}.", "we booked a holiday in {place} for {month}."],
        update=[
            "we changed our plans, we're going to {place} in {month} instead.",
            "the old trip is cancelled; {place} in {month} is the new plan.",
        ],
        changes=["place", "month"],
        ask=["Where are we going on vacation?", "What's the destination of our next getaway?"],
        about="where we are going on holiday",
        answer="{place} in {month}",
        mention=["I need a break, honestly.", "I've been reading travel blogs all week."],
        echo=["A holiday will do you good.", "It's exciting to have something to look forward to."],
    ),
    FactKind(
        key="workout_day",
        check=["Is {sport} still on {day} mornings?", "Do you still keep {day} mornings for {sport}?"],
        correct=["No, {day} mornings now.", "Moved it, {day} is the day now."],
        clarify=["Which day do you usually exercise?", "Is there a fixed slot for training in your week?"],
        reply=["{sport} on {day} mornings, never skipped.", "{day} mornings, {sport}."],
        topics=("training", "week"),
        requests=[
            "Which morning would suit me for an early meeting?",
            "How should I plan my meals around my training?",
        ],
        asked=[
            "What should I eat before I {go} on {day} mornings?",
            "How do I recover after my {sport} every {day} morning?",
        ],
        asked_update=[
            "Now that I've moved my {sport} to {day} mornings, how should I plan the rest of that day?",
            "Since {sport} is on {day} from now on, which evening is best for a rest?",
        ],
        values=[
            {"sport": s, "go": g, "day": d}
            for s, g in [("swimming", "go swimming"), ("climbing", "go climbing"), ("yoga", "do yoga")]
            for d in ["Monday", "Wednesday", "Saturday", "Thursday"]
        ],
        say=["I {go} every {day} morning.", "{day} mornings are for {sport}, I never skip them."],
        update=["I moved my {sport} to {day} mornings.", "from now on {sport} is on {day}, the old slot didn't work."],
        changes=["day"],
        ask=["Which weekday do I keep free for {sport}?", "When in the week do I do my regular exercise?"],
        about="the day of my weekly {sport}",
        answer="{day}",
        mention=["My shoulders are sore from training.", "I bought a new bag for my sports gear."],
        echo=["Staying active will help with this.", "Keep your exercise routine in the plan."],
    ),
    FactKind(
        key="dentist",
        check=["Is your dentist appointment still on {date}?", "Is the dentist still booked for {date}?"],
        correct=["No, it's {date} now.", "They moved it to {date}."],
        clarify=[
            "When is your next dentist appointment?",
            "Do you have any appointments coming up that I should plan around?",
        ],
        reply=["{date}, finally booked.", "On {date}, at the dentist."],
        topics=("week",),
        requests=[
            "Are there any appointments I should plan my week around?",
            "What do I have coming up that I shouldn't forget?",
        ],
        asked=[
            "What should I ask at my dentist appointment on {date}?",
            "Can I eat normally before the dentist on {date}?",
        ],
        asked_update=[
            "The dentist moved my appointment to {date}, so should I take the whole day off?",
            "Since I had to reschedule the dentist to {date}, do I need a new referral?",
        ],
        values=[{"date": d} for d in ["12 February", "3 March", "18 April", "7 May", "21 June", "5 August"]],
        say=["my dentist appointment is on {date}.", "I finally booked the dentist for {date}."],
        update=["the dentist moved my appointment to {date}.", "I had to reschedule the dentist, it's on {date} now."],
        changes=["date"],
        ask=["When do I need to have my teeth checked?", "On what date is my next check-up at the practice?"],
        about="the date of my dental check-up",
        answer="{date}",
        mention=["One of my molars has been sensitive.", "I hate sitting in waiting rooms."],
        echo=["Good that you're looking after your health.", "Medical appointments are worth keeping."],
    ),
    FactKind(
        key="language",
        clarify=["Is there a language you're picking up?", "Are you learning any languages at the moment?"],
        reply=["{lang}, with an app every day.", "Yes, {lang}, in an evening class."],
        topics=("week",),
        requests=[
            "Can you recommend podcasts for my commute?",
            "Which films could I watch to help with my studies?",
        ],
        asked=[
            "Which podcasts would help with the {lang} I'm learning on an app every day?",
            "How can I get more out of my evening class in {lang}?",
        ],
        values=[{"lang": x} for x in ["Portuguese", "Japanese", "Italian", "Korean", "Dutch", "Greek"]],
        say=["I'm learning {lang} with an app every day.", "I signed up for an evening class in {lang}."],
        ask=["Which foreign language am I studying?", "What language have I been practising lately?"],
        about="the language I'm learning",
        answer="{lang}",
        mention=["My vocabulary app keeps nagging me.", "Grammar is the hardest part for me."],
        echo=["Learning a language takes patience.", "Short daily sessions work best for languages."],
    ),
    FactKind(
        key="author",
        clarify=["Who is your favourite author?", "Which writer do you like most?"],
        reply=["{author}, I've read everything.", "{author}, no question."],
        topics=("sleep",),
        requests=[
            "Can you recommend a novel for my next holiday?",
            "Which book should I buy next?",
        ],
        asked=[
            "Which books are like those of {author}, my favourite writer?",
            "Since nobody writes like {author} in my opinion, what should I read next?",
        ],
        values=[{"author": a} for a in ["Ursula K. Le Guin", "Haruki Murakami", "Zadie Smith", "Terry Pratchett"]],
        say=["{author} is my favourite writer, I've read everything.", "nobody writes like {author}, in my opinion."],
        ask=["Whose novels do I like best?", "Which novelist do I admire most?"],
        about="my favourite author",
        answer="{author}",
        mention=["I finished another book on the train.", "My reading list is getting far too long."],
        echo=["Reading before bed is a good habit.", "Books are a great way to unwind."],
    ),
]

PACK = Pack(
    language="en",
    user="User",
    assistant="Assistant",
    facts=FACTS,
    topics=TOPICS,
    leads=["By the way,", "Oh, and for context,", "Not related, but", "Quick update:", "Also,"],
    follow_ups=[
        ("Thanks, that's helpful. Could you make it a bit shorter?", "Sure, here is a shorter version."),
        (
            "Great. What are the most common mistakes with this?",
            "Good question; these are the points people get wrong.",
        ),
        ("Can you turn that into a simple checklist?", "Of course, here are the points as a checklist."),
        ("What would you change if I only had half the time?", "With half the time, I would keep only the essentials."),
        ("That makes sense. Is there anything I should avoid?", "Yes, a few things are worth avoiding."),
        ("Could you explain the second point in more detail?", "Gladly, let me go into more detail."),
    ],
    intros=[
        "Of course, here is a plan that should work well for you.",
        "Happy to help with that; let's go through it step by step.",
        "Good question, and there are a few simple things that make a big difference.",
        "Sure, here's how I would approach it.",
    ],
    outros=[
        "Let me know if you'd like me to adjust anything.",
        "I hope this helps, and tell me how it goes.",
        "If you want, I can go into more detail on any of these points.",
        "Feel free to come back with questions.",
        "Would you like me to turn this into a short checklist?",
        "Shall I go into more detail on any of these points?",
        "Does this work for you, or should I change something?",
    ],
    multi_hop=[
        "Remind me of two things: {a}, and {b}.",
        "I'm filling in a form. What are {a} and {b}?",
        "Can you tell me {a}, and also {b}?",
        "I forgot both {a} and {b}. What were they?",
    ],
)
